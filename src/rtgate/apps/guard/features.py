"""Features of 20 ms windows (log-mel and band crest), a streaming resampler, a framer.

One window is 320 samples at 16 kHz and gets one FFT (320 points, 50 Hz bins), from which:

- log-mel: the Hann-windowed spectrum (the window applied in the frequency domain as
  ``0.5 X[k] - 0.25 (X[k-1] + X[k+1])``), ``N_MELS`` triangular filters on the HTK mel scale
  (built here with numpy) and the natural log of the band energies;
- band envelope: log-mel averages over the window, so a bearing's impacts (resonance bursts
  of 1-3 ms) look like a little more noise. A vibration analyst looks at the envelope of a
  high band instead: each of ``CREST_BANDS`` is cut out of the spectrum and brought back to
  the time domain, and its energy over 32 sub-frames of 0.625 ms is the envelope. Two numbers
  per band: the crest ``log(max / mean)`` (impulsiveness, a cheap spectral kurtosis: about 1
  for steady noise, up to ``log(32)`` for one burst) and the periodicity, the highest
  normalised autocorrelation of the envelope at lags of 1.9-15 ms (impact rates of 67-530 Hz,
  where bearing defect frequencies lie): one benign knock is impulsive but not periodic; a
  defect repeats within a window.

``WindowFeatures`` returns all, ``N_FEATURES`` numbers per window, for many windows at once
(one row per station), so a tick of many stations is one batched FFT. The filterbank product
uses ``einsum`` rather than BLAS: a threaded BLAS makes such small products slower on a busy
machine, and the result is the same.

Resampling uses ``soxr`` (streaming): it keeps filter state between chunks, so audio read in
pieces from stdin or a sound card at 44.1/48 kHz is resampled without chunk-edge artefacts,
it is fast C code and its wheel needs only numpy. ``scipy.signal.resample_poly`` works on
whole arrays only and would bring all of SciPy to the guard extra.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from rtgate.errors import InvalidRequest

__all__ = [
    "CREST_BANDS",
    "HOP",
    "N_FEATURES",
    "N_MELS",
    "RATE",
    "Framer",
    "Resampler",
    "WindowFeatures",
    "mel_filterbank",
]

RATE = 16_000
HOP = 320  # 20 ms
N_MELS = 40
CREST_BANDS = ((2000.0, 3500.0), (3500.0, 5500.0), (5500.0, 8000.0))
N_FEATURES = N_MELS + 2 * len(CREST_BANDS)
_SUB = 10  # samples per envelope sub-frame (0.625 ms)
_LAGS = range(3, 25)  # envelope autocorrelation lags, in sub-frames
F32 = npt.NDArray[np.float32]


def _hz_to_mel(f: npt.ArrayLike) -> npt.NDArray[np.float64]:
    return 2595.0 * np.log10(1.0 + np.asarray(f, dtype=np.float64) / 700.0)


def _mel_to_hz(m: npt.ArrayLike) -> npt.NDArray[np.float64]:
    return 700.0 * (10.0 ** (np.asarray(m, dtype=np.float64) / 2595.0) - 1.0)


def mel_filterbank(
    n_mels: int = N_MELS, n_fft: int = HOP, rate: int = RATE, fmin: float = 20.0
) -> F32:
    """Triangular mel filters, shape ``(n_fft // 2 + 1, n_mels)``, each of unit area.

    Filters narrower than one FFT bin would be empty; they are widened to one bin each side.
    """
    if n_mels < 1 or n_fft < 2 * n_mels:
        raise InvalidRequest(f"need 1 <= n_mels <= n_fft/2, got {n_mels}, {n_fft}")
    bins = np.fft.rfftfreq(n_fft, 1.0 / rate)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(fmin), _hz_to_mel(rate / 2), n_mels + 2))
    width = bins[1]
    fb = np.zeros((len(bins), n_mels))
    for i in range(n_mels):
        lo, mid, hi = edges[i], edges[i + 1], edges[i + 2]
        lo, hi = min(lo, mid - width), max(hi, mid + width)
        fb[:, i] = np.clip(np.minimum((bins - lo) / (mid - lo), (hi - bins) / (hi - mid)), 0, None)
        fb[:, i] /= fb[:, i].sum()
    return fb.astype(np.float32)


def _as_windows(windows: npt.ArrayLike) -> F32:
    x = np.asarray(windows, dtype=np.float32)
    if x.ndim == 1:
        x = x[None, :]
    if x.ndim != 2 or x.shape[1] != HOP:
        raise InvalidRequest(f"windows must have shape (N, {HOP}), got {x.shape}")
    if not np.isfinite(x).all():
        raise InvalidRequest("windows contain NaN or infinity")
    return x


class WindowFeatures:
    """``(N, 320) float32 in [-1, 1] -> (N, N_FEATURES)``: log-mel, crests, periodicities."""

    n_features = N_FEATURES

    def __init__(self) -> None:
        self._fb = mel_filterbank()
        f = np.fft.rfftfreq(HOP, 1.0 / RATE)
        self._masks = np.stack([(f >= lo) & (f < hi) for lo, hi in CREST_BANDS])
        self._masks = self._masks.astype(np.complex64)

    def __call__(self, windows: npt.ArrayLike) -> F32:
        x = _as_windows(windows)
        n = len(x)
        spec = np.fft.rfft(x, axis=1).astype(np.complex64)
        # periodic Hann applied in the frequency domain (mirror the neighbours at the ends)
        ext = np.concatenate([np.conj(spec[:, 1:2]), spec, np.conj(spec[:, -2:-1])], axis=1)
        hann = 0.5 * spec - 0.25 * (ext[:, :-2] + ext[:, 2:])
        power = hann.real**2 + hann.imag**2
        mel = np.log(np.einsum("nk,km->nm", power, self._fb) + 1e-10)
        band = np.fft.irfft(spec[:, None, :] * self._masks[None], n=HOP, axis=2)
        e = (band * band).reshape(n, len(CREST_BANDS), HOP // _SUB, _SUB).sum(axis=3)
        mean = e.mean(axis=2, keepdims=True)
        crest = np.log((e.max(axis=2) + 1e-12) / (mean[..., 0] + 1e-12))
        d = e - mean
        var = (d * d).mean(axis=2) + 1e-20
        m = d.shape[2]
        ac = np.stack([(d[..., : m - k] * d[..., k:]).mean(axis=2) for k in _LAGS], axis=2)
        period = np.clip(ac.max(axis=2) / var, -1.0, 1.0)
        return np.concatenate([mel, crest, period], axis=1).astype(np.float32)

    def frames(self, audio: npt.ArrayLike) -> F32:
        """Features of every whole window of a 16 kHz signal, ``(len // 320, N_FEATURES)``."""
        a = np.asarray(audio, dtype=np.float32)
        n = len(a) // HOP
        return self(a[: n * HOP].reshape(n, HOP)) if n else np.zeros((0, N_FEATURES), np.float32)


class Resampler:
    """Streaming resampler from ``rate`` to 16 kHz (identity when ``rate`` is 16 kHz)."""

    def __init__(self, rate: int) -> None:
        if not isinstance(rate, int) or not 1000 <= rate <= 384_000:
            raise InvalidRequest(f"sample rate must be an int in [1000, 384000], got {rate!r}")
        self.rate = rate
        self._stream = None
        if rate != RATE:
            import soxr  # only needed for other rates

            self._stream = soxr.ResampleStream(rate, RATE, 1, dtype="float32", quality="HQ")

    def __call__(self, chunk: npt.ArrayLike, last: bool = False) -> F32:
        x = np.ascontiguousarray(chunk, dtype=np.float32)
        if self._stream is None:
            return x
        return np.asarray(self._stream.resample_chunk(x, last=last), dtype=np.float32)

    @staticmethod
    def whole(audio: npt.ArrayLike, rate: int) -> F32:
        """Resample a whole signal to 16 kHz."""
        return Resampler(rate)(audio, last=True)


class Framer:
    """Cuts a stream of 16 kHz chunks into 320-sample windows.

    ``push(chunk, arrival_ts)`` yields ``(window, window_end_ts)``: the end time of a window is
    the arrival time of the chunk that completed it, less the samples of that chunk after it.
    """

    def __init__(self) -> None:
        self._buf = np.zeros(0, dtype=np.float32)

    def push(self, chunk: npt.ArrayLike, arrival_ts: float) -> Iterator[tuple[F32, float]]:
        x = np.asarray(chunk, dtype=np.float32)
        self._buf = np.concatenate([self._buf, x]) if len(self._buf) else x
        n = len(self._buf) // HOP
        for i in range(n):
            after = len(self._buf) - (i + 1) * HOP  # samples that arrived after this window
            yield self._buf[i * HOP : (i + 1) * HOP], arrival_ts - after / RATE
        self._buf = self._buf[n * HOP :].copy()
