from __future__ import annotations

import numpy as np
import pytest

from rtgate.apps.guard.features import (
    CREST_BANDS,
    HOP,
    N_FEATURES,
    N_MELS,
    RATE,
    Framer,
    Resampler,
    WindowFeatures,
    mel_filterbank,
)
from rtgate.apps.guard.simulate import Clip
from rtgate.core.errors import InvalidRequest


def reference_features(windows: np.ndarray) -> np.ndarray:
    """The features written plainly (the implementation the detector was first trained on):
    a masked spectrum and a full ``irfft`` per band, one slice product per lag."""
    x = np.asarray(windows, dtype=np.float32)
    spec = np.fft.rfft(x, axis=1).astype(np.complex64)
    ext = np.concatenate([np.conj(spec[:, 1:2]), spec, np.conj(spec[:, -2:-1])], axis=1)
    hann = 0.5 * spec - 0.25 * (ext[:, :-2] + ext[:, 2:])
    power = hann.real**2 + hann.imag**2
    mel = np.log(np.einsum("nk,km->nm", power, mel_filterbank()) + 1e-10)
    f = np.fft.rfftfreq(HOP, 1.0 / RATE)
    masks = np.stack([(f >= lo) & (f < hi) for lo, hi in CREST_BANDS]).astype(np.complex64)
    band = np.fft.irfft(spec[:, None, :] * masks[None], n=HOP, axis=2)
    e = (band * band).reshape(len(x), len(CREST_BANDS), HOP // 10, 10).sum(axis=3)
    mean = e.mean(axis=2, keepdims=True)
    crest = np.log((e.max(axis=2) + 1e-12) / (mean[..., 0] + 1e-12))
    d = e - mean
    var = (d * d).mean(axis=2) + 1e-20
    m = d.shape[2]
    ac = np.stack([(d[..., : m - k] * d[..., k:]).mean(axis=2) for k in range(3, 25)], axis=2)
    period = np.clip(ac.max(axis=2) / var, -1.0, 1.0)
    return np.concatenate([mel, crest, period], axis=1).astype(np.float32)


@pytest.mark.parametrize("scale", [1e-4, 0.05, 1.0])
def test_features_equal_the_reference_on_random_windows(scale: float) -> None:
    # 600 rows: more than one pass of work arrays; then fewer rows reuse them
    x = (np.random.default_rng(3).standard_normal((600, HOP)) * scale).astype(np.float32)
    wf = WindowFeatures()
    for rows in (x, x[:7], x[:1]):
        np.testing.assert_allclose(wf(rows), reference_features(rows), rtol=1e-5, atol=1e-5)


def test_features_equal_the_reference_on_simulated_motors(
    normal_clip: Clip, fault_clip: Clip
) -> None:
    wf = WindowFeatures()
    for clip in (normal_clip, fault_clip):
        got = wf.frames(clip.audio)
        n = len(got)
        ref = reference_features(clip.audio[: n * HOP].reshape(n, HOP))
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    silence = np.zeros((2, HOP), np.float32)
    np.testing.assert_array_equal(wf(silence), reference_features(silence))


def test_a_result_is_not_overwritten_by_the_next_call() -> None:
    rng = np.random.default_rng(4)
    wf = WindowFeatures()
    a, b = rng.standard_normal((2, 3, HOP)).astype(np.float32)
    first = wf(a)
    kept = first.copy()
    wf(b)
    np.testing.assert_array_equal(first, kept)


def test_mel_filterbank_covers_every_band_with_unit_area() -> None:
    fb = mel_filterbank()
    assert fb.shape == (HOP // 2 + 1, N_MELS)
    np.testing.assert_allclose(fb.sum(axis=0), 1.0, rtol=1e-5)
    centres = (fb * np.arange(fb.shape[0])[:, None]).sum(0)
    assert np.all(np.diff(centres) > 0)  # ordered low to high


def test_log_mel_peaks_in_the_band_of_a_tone() -> None:
    t = np.arange(HOP) / RATE
    feats = WindowFeatures()(np.sin(2 * np.pi * 1000 * t)[None])
    fb = mel_filterbank()
    band = int(np.argmax(fb[1000 * HOP // RATE]))  # the filter weighting the 1 kHz bin most
    assert abs(int(np.argmax(feats[0, :N_MELS])) - band) <= 1


def test_frequency_domain_hann_equals_time_domain_hann() -> None:
    x = np.random.default_rng(0).standard_normal(HOP)
    w = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(HOP) / HOP)
    ref = np.log(np.abs(np.fft.rfft(x * w)) ** 2 @ mel_filterbank().astype(np.float64) + 1e-10)
    got = WindowFeatures()(x[None])[0, :N_MELS]
    np.testing.assert_allclose(got, ref, atol=1e-3)


def test_periodicity_tells_a_defect_from_one_knock() -> None:
    rng = np.random.default_rng(1)
    noise = 0.05 * rng.standard_normal(HOP)
    burst = 0.3 * np.exp(-np.arange(40) / 6.0) * np.sin(2 * np.pi * 4000 * np.arange(40) / RATE)
    one, two = noise.copy(), noise.copy()
    one[60:100] += burst
    for start in (30, 190):  # 10 ms apart: a 100 Hz defect
        two[start : start + 40] += burst
    f = WindowFeatures()(np.stack([noise, one, two]))
    period = f[:, N_MELS + 3 + 1]  # periodicity of the 3.5-5.5 kHz band
    crest = f[:, N_MELS + 1]
    assert period[2] > period[0] + 0.25 and period[2] > period[1] + 0.25
    assert crest[1] > crest[0] and crest[2] > crest[0]


def test_batch_rows_are_independent() -> None:
    x = np.random.default_rng(2).standard_normal((5, HOP)).astype(np.float32) * 0.1
    wf = WindowFeatures()
    batch = wf(x)
    assert batch.shape == (5, N_FEATURES)
    np.testing.assert_allclose(batch[3], wf(x[3:4])[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [np.zeros((2, 100)), np.zeros((2, 2, HOP)), np.full(HOP, np.nan)])
def test_bad_windows_are_refused(bad: np.ndarray) -> None:
    with pytest.raises(InvalidRequest):
        WindowFeatures()(bad)


@pytest.mark.parametrize("rate", [8000, 44100, 48000])
def test_streaming_resampler_keeps_a_tone_in_chunks(rate: int) -> None:
    t = np.arange(rate) / rate
    x = np.sin(2 * np.pi * 440 * t).astype(np.float32)
    rs = Resampler(rate)
    out = np.concatenate([rs(x[i : i + 441]) for i in range(0, rate, 441)] + [rs(x[:0], last=True)])
    assert abs(len(out) - RATE) <= 2
    spec = np.abs(np.fft.rfft(out[1000:-1000] * np.hanning(len(out) - 2000)))
    peak = np.argmax(spec) * RATE / (len(out) - 2000)
    assert abs(peak - 440) < 2


def test_resampler_refuses_a_silly_rate() -> None:
    with pytest.raises(InvalidRequest):
        Resampler(12)


def test_framer_cuts_windows_and_stamps_their_end() -> None:
    fr = Framer()
    out = list(fr.push(np.zeros(500, np.float32), 10.0))
    assert len(out) == 1 and out[0][1] == pytest.approx(10.0 - 180 / RATE)
    out = list(fr.push(np.zeros(460, np.float32), 11.0))
    assert len(out) == 2 and out[-1][1] == pytest.approx(11.0)


def test_framer_cuts_rows_of_stations_alike() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 1000)).astype(np.float32)
    together, alone = Framer(), [Framer() for _ in range(3)]
    got = [w for part in (x[:, :500], x[:, 500:]) for w in together.push(part, 1.0)]
    for i, fr in enumerate(alone):
        want = [w for part in (x[i, :500], x[i, 500:]) for w in fr.push(part, 1.0)]
        assert [e for _, e in got] == [e for _, e in want]
        for (rows, _), (w, _) in zip(got, want, strict=True):
            np.testing.assert_array_equal(rows[i], w)
    with pytest.raises(InvalidRequest, match="rows"):
        list(together.push(np.zeros((2, 10), np.float32), 2.0))
