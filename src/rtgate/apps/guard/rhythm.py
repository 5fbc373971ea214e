"""The envelope's rhythm over the last 200 ms: is the high band a train of impacts?

A bearing defect is a train of impacts at its defect frequency (roughly 3-10x the shaft
speed, 40-500 Hz), each ringing a high-frequency resonance. On any machine, the envelope
of the band that holds the resonance then repeats at that rate, and an impact is sharp, so
the envelope's spectrum has a comb: a line at the rate and at its harmonics. A single
knock, speech, hiss or a steady fan has no comb (a fan's blade pass modulates the noise
like a sine: one line, no harmonics).

:class:`Rhythm` keeps, per station, the band envelopes ``features.py`` computes for every
20 ms window (energy per 0.625 ms sub-frame in each of ``CREST_BANDS``) for the last
``WINDOWS`` windows (a ring, vectorised over stations), and after each window computes,
per station:

- the envelope spectrum of each band: the envelope over its own mean, less 1, Hann
  windowed, ``|rfft|^2`` (5 Hz bins up to 800 Hz for 200 ms);
- ``L = log(S_max / floor)``, where ``S_max`` is the highest of each bin and its two
  neighbours (a line between two bins, or smeared by slip) and ``floor`` is the band's
  median bin from 40 Hz up, over ``ln 2`` (the mean of noise bins, which are exponential);
- the comb ``c(f) = mean of L(h f)`` for the harmonics ``h = 1..HARMONICS`` below 800 Hz,
  for ``f`` from 40 to 500 Hz (5 Hz steps);
- the statistic ``max over bands and f of c(f)``: about 1.5-2.5 on noise (the highest of
  ~280 draws), 3-6 under a defect as loud as the machine (validation, docs/guard.md).

It is a plain synchronous class, like the detector. Only an enrolled station uses it: with
the rules' rhythm clause (``Rule.rhythm``, off by default) a window whose statistic goes past
the station's own healthy range (``baseline.py``) is a hit, which is what removes the rhythm
a station always has (a compressor's valves, a blade pass that happens to be impulsive).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.features import CREST_BANDS, HOP, N_SUB, RATE
from rtgate.core.errors import InvalidRequest

__all__ = ["F_MAX", "F_MIN", "HARMONICS", "WINDOWS", "Rhythm", "comb_statistic"]

F32 = npt.NDArray[np.float32]
WINDOWS = 10  # 200 ms of envelope
HARMONICS = 3
F_MIN, F_MAX = 40.0, 500.0  # defect rates looked for, Hz
_SUB_RATE = RATE / (HOP // N_SUB)  # envelope samples per second (1,600)


class _Comb:
    """The constant parts of the statistic for a ring of ``t`` sub-frames."""

    def __init__(self, t: int) -> None:
        self.t = t
        # the taper: the older half rises as a Hann's first half, the newer half counts whole
        self.hann = np.ones(t)
        self.hann[: t // 2] = np.hanning(2 * (t // 2))[: t // 2]
        self.nb = t // 2 + 1
        df = _SUB_RATE / t
        self.lo = int(np.ceil(F_MIN / df))
        self.hi = int(np.floor(F_MAX / df))
        if self.lo < 2 or self.hi <= self.lo:
            raise InvalidRequest(f"a ring of {t} sub-frames cannot resolve {F_MIN:g}-{F_MAX:g} Hz")
        self.mid = (self.nb - self.lo) // 2  # the median bin's rank from ``lo`` on
        ks = np.arange(self.lo, self.hi + 1)
        # harmonic h of candidate k is bin h*k, used while h*k <= nb - 2 (its right
        # neighbour exists); c(k) = the mean over those
        self.last = [min(self.hi, (self.nb - 2) // h) for h in range(1, HARMONICS + 1)]
        count = np.zeros(len(ks), np.float32)
        for last in self.last:
            count += ks <= last
        self.inv_count = (1.0 / count).astype(np.float32)
        self.freqs = (ks * df).astype(np.float32)


def comb_statistic(envelope: npt.ArrayLike) -> F32:
    """The statistic of the module doc for envelopes ``(..., bands, t)`` (energies, any
    ``t`` that resolves 40-500 Hz): one number per leading index. :class:`Rhythm` computes
    the same for a stream."""
    e = np.asarray(envelope, np.float32)
    return _statistic(e, _Comb(e.shape[-1]))


def _statistic(e: F32, comb: _Comb) -> F32:
    # float64 for the FFT: numpy's float32 FFT is several times slower (it converts inside)
    x = e.astype(np.float64)
    x /= x.mean(axis=-1, keepdims=True) + 1e-20
    x -= x.mean(axis=-1, keepdims=True)
    x *= comb.hann
    spec = np.fft.rfft(x, axis=-1)
    s = np.square(spec.real, dtype=np.float64)
    s += np.square(spec.imag)
    s32 = s.astype(np.float32)
    high = s32[..., comb.lo :]
    floor = np.partition(high, comb.mid, axis=-1)[..., comb.mid : comb.mid + 1]
    floor /= np.float32(np.log(2.0))  # the median of exponential bins, as their mean
    floor += np.float32(1e-30)
    m = s32.copy()
    np.maximum(m[..., 1:], s32[..., :-1], out=m[..., 1:])
    np.maximum(m[..., :-1], s32[..., 1:], out=m[..., :-1])
    m /= floor
    m += np.float32(1e-12)
    np.log(m, out=m)
    lo = comb.lo
    c = m[..., lo : comb.hi + 1].copy()  # harmonic 1 of every candidate
    for h, last in enumerate(comb.last[1:], start=2):  # bins h*lo, h*(lo+1), ...: a stride
        c[..., : last - lo + 1] += m[..., h * lo : h * last + 1 : h]
    c *= comb.inv_count
    out: F32 = c.reshape(*c.shape[:-2], -1).max(axis=-1)
    return out


class Rhythm:
    """The statistic of the module doc for ``n_streams`` stations, one window at a time.

    :meth:`step` takes each station's newest band envelopes ``(N, bands, N_SUB)`` (what
    ``WindowFeatures(windows, envelope=...)`` writes) and returns ``(N,)``: 0 until a station
    has heard ``windows`` windows (0.2 s; the detector hears a fault present from the first
    window on its own).
    """

    def __init__(self, n_streams: int, windows: int = WINDOWS) -> None:
        if n_streams < 1 or not 4 <= windows <= 64:
            raise InvalidRequest(f"need n_streams >= 1 and 4 <= windows <= 64, got {windows}")
        self.n_streams = n_streams
        self.windows = windows
        nb = len(CREST_BANDS)
        self._comb = _Comb(windows * N_SUB)
        self._ring = np.zeros((n_streams, nb, windows * N_SUB), np.float32)
        self._heard = np.zeros(n_streams, np.int64)  # windows in the ring, up to ``windows``
        self._filling = True
        self.last = np.zeros(n_streams, np.float32)

    def reset(self, stream: int | None = None) -> None:
        """Forget one station's ring (or every station's): a new recording."""
        self._heard[slice(None) if stream is None else stream] = 0
        self._filling = True

    def step(self, envelope: npt.ArrayLike, rows: npt.ArrayLike | None = None) -> F32:
        """The statistic of each station in ``rows`` (default all, in order) after its
        newest window's envelope."""
        e = np.asarray(envelope, np.float32)
        idx = None if rows is None else np.asarray(rows, np.int64)
        n = self.n_streams if idx is None else len(idx)
        if e.shape != (n, len(CREST_BANDS), N_SUB):
            raise InvalidRequest(f"envelope must be ({n}, {len(CREST_BANDS)}, {N_SUB})")
        if idx is None:
            ring = self._ring
            ring[:, :, :-N_SUB] = ring[:, :, N_SUB:]
            ring[:, :, -N_SUB:] = e
            out = _statistic(ring, self._comb)
            if self._filling:
                heard = self._heard
                heard += heard < self.windows
                out[heard < self.windows] = 0.0
                self._filling = bool((heard < self.windows).any())
            self.last[:] = out
            return out
        ring = self._ring[idx]
        ring[:, :, :-N_SUB] = ring[:, :, N_SUB:]
        ring[:, :, -N_SUB:] = e
        self._ring[idx] = ring
        heard = np.minimum(self._heard[idx] + 1, self.windows)
        self._heard[idx] = heard
        out = _statistic(ring, self._comb)
        out[heard < self.windows] = 0.0
        self._filling = bool((self._heard < self.windows).any())
        self.last[idx] = out
        return out
