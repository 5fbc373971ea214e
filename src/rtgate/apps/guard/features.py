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
(one row per station), so a tick of many stations is one batched FFT. No product goes to
BLAS: a threaded BLAS makes such small products slower on a busy machine (milliseconds, its
threads are not real-time), and the result is the same.

Resampling uses ``soxr`` (streaming): it keeps filter state between chunks, so audio read in
pieces from stdin or a sound card at 44.1/48 kHz is resampled without chunk-edge artefacts,
it is fast C code and its wheel needs only numpy. ``scipy.signal.resample_poly`` works on
whole arrays only and would bring all of SciPy to the guard extra.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from rtgate.core.errors import InvalidRequest

__all__ = [
    "CREST_BANDS",
    "HOP",
    "N_FEATURES",
    "N_MELS",
    "N_SUB",
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
N_SUB = HOP // _SUB  # envelope sub-frames per window
_LAGS = range(3, 25)  # envelope autocorrelation lags, in sub-frames
_BLOCK = 256  # windows per pass: bounds the work arrays of a long file
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


class _Scratch:
    """Work arrays for up to ``n`` windows, reused call after call.

    Fresh arrays of this size (hundreds of KB) come from ``mmap`` and are returned on every
    free; touching their pages costs more than the FFTs on a virtual machine (about 500
    page faults per 256-window tick). The spectra of the bands stay zero outside their bins.
    """

    def __init__(self, n: int) -> None:
        nb, bands = HOP // 2 + 1, len(CREST_BANDS)
        self.n = n
        self.x = np.empty((n, HOP), np.float64)
        self.spec64 = np.empty((n, nb), np.complex128)
        self.ext = np.empty((n, nb + 2), np.complex64)  # spectrum with a mirrored bin each end
        self.hann = np.empty((n, nb), np.complex64)
        self.power = np.empty((n, nb), np.float32)
        self.weighted = np.empty((n, nb), np.float32)
        self.band_spec = np.zeros((n, bands, nb), np.complex64)
        self.band = np.empty((n, bands, HOP), np.float32)
        self.e = np.empty((n, bands, N_SUB), np.float32)
        self.e_t = np.empty((N_SUB, n, bands), np.float32)  # sub-frame first: fast max
        self.d = np.empty((n, bands, N_SUB), np.float32)
        self.mean = np.empty((n, bands), np.float32)
        self.peak = np.empty((n, bands), np.float32)
        # envelope rows padded with zeros past the end; ``lagged[r, t, j]`` is the value at
        # ``t + _LAGS[j]`` (0 beyond the window), a view, so one einsum gives every lag
        self.pad = np.zeros((n * bands, N_SUB + _LAGS.stop - 1), np.float32)
        self.lagged = sliding_window_view(self.pad, len(_LAGS), axis=1)[
            :, _LAGS.start : _LAGS.start + N_SUB
        ]
        self.ac = np.empty((len(_LAGS), n * bands), np.float32)  # lag first: fast max
        self.ac_max = np.empty(n * bands, np.float32)


class WindowFeatures:
    """``(N, 320) float32 in [-1, 1] -> (N, N_FEATURES)``: log-mel, crests, periodicities.

    The arithmetic is that of the plain formulas in the module doc, arranged for a tick of
    many stations: the FFT in float64 (numpy's float32 FFT converts to float64 internally and
    allocates for it), the mel filters as two weighted segment sums (each bin feeds at most
    two filters, and the even filters do not overlap, nor do the odd ones), each band's
    spectrum copied into its slot of a zeroed array instead of masked, one ``irfft`` for all
    bands, and the autocorrelation at every lag in one ``einsum`` over a lagged view. Work
    arrays are kept per thread (``frames`` of a long file goes in blocks of ``_BLOCK``
    windows); the result is a new array. Equal to the plain formulas within float32 rounding
    (``tests/apps/guard/test_guard_features.py`` keeps a reference).
    """

    n_features = N_FEATURES

    def __init__(self) -> None:
        self._fb = mel_filterbank()
        # filter m covers bins first[m]..end[m]-1; a layer is every other filter, as one
        # weight per bin (0 between its filters, times 1/4: see the Hann below) summed in
        # segments starting at each filter's first bin
        nz = self._fb != 0
        first = [int(np.argmax(nz[:, m])) for m in range(N_MELS)]
        end = [len(nz) - int(np.argmax(nz[::-1, m])) for m in range(N_MELS)]
        if not all(end[m] <= first[m + 2] for m in range(N_MELS - 2)):
            raise InvalidRequest("mel filters overlap more than their neighbours")
        self._mel_w = np.zeros((2, len(nz)), np.float32)
        for m in range(N_MELS):
            band = slice(first[m], end[m])
            self._mel_w[m % 2, band] = self._fb[band, m] * np.float32(0.25)
        self._mel_starts = [np.array(first[k::2], np.intp) for k in (0, 1)]
        f = np.fft.rfftfreq(HOP, 1.0 / RATE)
        self._bands: list[tuple[int, int]] = []
        for lo, hi in CREST_BANDS:
            k = np.flatnonzero((f >= lo) & (f < hi))
            self._bands.append((int(k[0]), int(k[-1]) + 1))  # contiguous bins
        self._lag_len = np.array([N_SUB - k for k in _LAGS], np.float32)
        self._local = threading.local()

    def _scratch(self, n: int) -> _Scratch:
        s: _Scratch | None = getattr(self._local, "scratch", None)
        if s is None or s.n < n:
            s = _Scratch(n)
            self._local.scratch = s
        return s

    def __call__(self, windows: npt.ArrayLike, envelope: F32 | None = None) -> F32:
        """Features of each window; with ``envelope`` (``(N, len(CREST_BANDS), N_SUB)``
        float32), each band's envelope (energy per 0.625 ms sub-frame) is written there too,
        for the slower statistics that look across windows (``rhythm.py``)."""
        x = _as_windows(windows)
        if envelope is not None and envelope.shape != (len(x), len(CREST_BANDS), N_SUB):
            raise InvalidRequest(f"envelope must be ({len(x)}, {len(CREST_BANDS)}, {N_SUB})")
        out = np.empty((len(x), N_FEATURES), np.float32)
        for i in range(0, len(x), _BLOCK):
            env = None if envelope is None else envelope[i : i + _BLOCK]
            self._block(x[i : i + _BLOCK], out[i : i + _BLOCK], env)
        return out

    def _block(self, x: F32, out: F32, envelope: F32 | None = None) -> None:
        nb = len(CREST_BANDS)
        s = self._scratch(len(x))
        spec = self._spectrum(s, x)
        self._log_mel(s, spec, out[:, :N_MELS])
        e = self._band_energy(s, spec)
        if envelope is not None:
            envelope[...] = e
        mean = self._crest(s, e, out[:, N_MELS : N_MELS + nb])
        self._periodicity(s, e, mean, out[:, N_MELS + nb :])

    @staticmethod
    def _spectrum(s: _Scratch, x: F32) -> npt.NDArray[np.complex64]:
        """The rFFT of each window, in ``s.ext`` between a free bin at each end."""
        n = len(x)
        xd, spec64 = s.x[:n], s.spec64[:n]
        xd[...] = x
        np.fft.rfft(xd, axis=1, out=spec64)
        spec = s.ext[:n, 1:-1]
        spec[...] = spec64
        return spec

    def _log_mel(self, s: _Scratch, spec: npt.NDArray[np.complex64], mel: F32) -> None:
        """Log mel energies of the Hann-windowed spectrum, into ``mel``."""
        n = len(spec)
        ext = s.ext[:n]
        # periodic Hann applied in the frequency domain (mirror the neighbours at the ends),
        # doubled: X[k] - (X[k-1] + X[k+1]) / 2; the mel weights carry the 1/4 back (scaling
        # by powers of two is exact, so this equals 0.5 X[k] - 0.25 (...) bit for bit)
        np.conjugate(ext[:, 2], out=ext[:, 0])
        np.conjugate(ext[:, -3], out=ext[:, -1])
        hann = s.hann[:n]
        np.add(ext[:, :-2], ext[:, 2:], out=hann)
        hann *= np.float32(-0.5)
        hann += spec
        parts = hann.view(np.float32)  # re, im, re, im, ...
        np.square(parts, out=parts)
        power, weighted = s.power[:n], s.weighted[:n]
        np.add(parts[:, 0::2], parts[:, 1::2], out=power)
        for k in (0, 1):
            np.multiply(power, self._mel_w[k], out=weighted)
            np.add.reduceat(weighted, self._mel_starts[k], axis=1, out=mel[:, k::2])
        mel += np.float32(1e-10)
        np.log(mel, out=mel)

    def _band_energy(self, s: _Scratch, spec: npt.NDArray[np.complex64]) -> F32:
        """Each crest band back in the time domain, its energy per sub-frame ``(n, bands,
        sub-frames)``."""
        n, nb = len(spec), len(CREST_BANDS)
        band_spec, band = s.band_spec[:n], s.band[:n]
        for j, (k0, k1) in enumerate(self._bands):
            band_spec[:, j, k0:k1] = spec[:, k0:k1]
        # numpy 2 keeps float32 here; its type stubs only know a float64 ``out``
        np.fft.irfft(band_spec, n=HOP, axis=2, out=band)  # type: ignore[arg-type]
        np.square(band, out=band)
        e = s.e[:n]
        np.einsum("nbsk->nbs", band.reshape(n, nb, N_SUB, _SUB), out=e)
        return e

    @staticmethod
    def _crest(s: _Scratch, e: F32, crest: F32) -> F32:
        """``log(max / mean)`` of each band's envelope into ``crest``; returns the means."""
        n = len(e)
        mean, peak, e_t = s.mean[:n], s.peak[:n], s.e_t[:, :n]
        np.einsum("nbs->nb", e, out=mean)
        mean *= np.float32(1.0 / N_SUB)
        np.einsum("nbs->snb", e, out=e_t)
        np.maximum.reduce(e_t, axis=0, out=peak)
        peak += np.float32(1e-12)
        np.add(mean, np.float32(1e-12), out=crest)
        np.divide(peak, crest, out=crest)
        np.log(crest, out=crest)
        return mean

    def _periodicity(self, s: _Scratch, e: F32, mean: F32, period: F32) -> None:
        """The highest normalised autocorrelation of each envelope over ``_LAGS``, into
        ``period``. Uses up ``s.peak`` (the crest is done with it)."""
        n, nb = len(e), len(CREST_BANDS)
        d = s.d[:n]
        np.subtract(e, mean[..., None], out=d)
        var = s.peak[:n]
        np.einsum("nbs,nbs->nb", d, d, out=var)
        var *= np.float32(1.0 / N_SUB)
        var += np.float32(1e-20)
        rows = d.reshape(n * nb, N_SUB)
        s.pad[: n * nb, :N_SUB] = rows
        ac, ac_max = s.ac[:, : n * nb], s.ac_max[: n * nb]
        np.einsum("rt,rtk->kr", rows, s.lagged[: n * nb], out=ac)
        ac /= self._lag_len[:, None]  # mean over the overlap, as ``(d[:-k] * d[k:]).mean()``
        np.maximum.reduce(ac, axis=0, out=ac_max)
        period[...] = ac_max.reshape(n, nb)
        np.divide(period, var, out=period)
        np.clip(period, -1.0, 1.0, out=period)

    def frames(self, audio: npt.ArrayLike) -> F32:
        """Features of every whole window of a 16 kHz signal, ``(len // 320, N_FEATURES)``."""
        a = np.asarray(audio, dtype=np.float32)
        n = len(a) // HOP
        return self(a[: n * HOP].reshape(n, HOP)) if n else np.zeros((0, N_FEATURES), np.float32)

    def envelopes(self, audio: npt.ArrayLike) -> tuple[F32, F32]:
        """:meth:`frames` and the band envelopes of the same windows, ``(n, bands, N_SUB)``."""
        a = np.asarray(audio, dtype=np.float32)
        n = len(a) // HOP
        env = np.zeros((n, len(CREST_BANDS), N_SUB), np.float32)
        if not n:
            return np.zeros((0, N_FEATURES), np.float32), env
        return self(a[: n * HOP].reshape(n, HOP), env), env


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
    Chunks are 1-D (one station) or ``(stations, n)`` (one row per microphone, cut alike:
    windows ``(stations, 320)``).
    """

    def __init__(self) -> None:
        self._buf: F32 | None = None

    def push(self, chunk: npt.ArrayLike, arrival_ts: float) -> Iterator[tuple[F32, float]]:
        x = np.asarray(chunk, dtype=np.float32)
        if self._buf is not None and self._buf.shape[:-1] != x.shape[:-1]:
            raise InvalidRequest(f"chunk of shape {x.shape} after {self._buf.shape[:-1]} rows")
        buf = (
            x
            if self._buf is None or not self._buf.shape[-1]
            else np.concatenate([self._buf, x], axis=-1)
        )
        total = buf.shape[-1]
        n = total // HOP
        for i in range(n):
            after = total - (i + 1) * HOP  # samples that arrived after this window
            yield buf[..., i * HOP : (i + 1) * HOP], arrival_ts - after / RATE
        self._buf = buf[..., n * HOP :].copy()
