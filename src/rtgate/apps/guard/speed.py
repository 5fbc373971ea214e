"""A machine's shaft speed, read from its own sound (#18, session 34).

A rolling bearing's defects strike at fixed multiples of the shaft's rotation, its defect
*orders*: the ball-pass orders of the outer and inner race and twice the ball-spin order,
which follow from its geometry and which bearing makers print in their catalogues. A clause
that knows a station's orders need not look for a comb at every rate from 15 to 260 Hz
(``lines.py``): it looks at the few rates its bearing can strike at, which lets a fainter
comb through at the same false-stop rate (docs/guard.md, Session 34). For that it needs the
shaft speed to about 1 %: a drive ramps, a fixed-speed motor slips with its load.

A rotating machine's unbalance, misalignment and looseness put lines at the shaft frequency
and its first harmonics, so the speed is read there. Over a segment of the sound brought to
:data:`LOW_RATE` (only what is under 700 Hz counts), the log spectrum (zero-padded to
:data:`PAD` times the segment) is taken over its own floor (the median of each
``FLOOR_HZ`` block, interpolated), clipped at 0; for every candidate speed in the station's
range, the sum of that rise at the candidate's first :data:`HARMONICS` multiples; the best
candidate is the speed. One estimate reads one segment and nothing before it: an estimate that
jumps to a wrong candidate (a forklift's firing passing) is gone at the next segment.
"""

from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt
import soxr

from rtgate.core.errors import InvalidRequest

__all__ = ["HARMONICS", "LOW_RATE", "PAD", "low_band", "shaft_hz"]

F64 = npt.NDArray[np.float64]
LOW_RATE = 2000  # Hz: the sound the speed is read from
TOP_HZ = 700.0  # the spectrum read (the sixth harmonic of a 116 Hz shaft)
HARMONICS = 6
PAD = 8  # zero-padding: candidates between a segment's bins
FLOOR_HZ = 8.0  # the floor's blocks
STEP = 0.0005  # candidates 0.05 % apart (log-spaced)
MIN_SECONDS = 0.5


def low_band(audio: npt.ArrayLike, rate: int) -> F64:
    """``audio`` at ``rate`` Hz brought to :data:`LOW_RATE` (soxr's anti-aliasing)."""
    x = np.asarray(audio, np.float64)
    if x.ndim != 1 or rate < LOW_RATE:
        raise InvalidRequest(f"low_band takes mono audio at {LOW_RATE} Hz or more")
    out: F64 = np.asarray(soxr.resample(x, rate, LOW_RATE), np.float64)
    return out


@functools.lru_cache(maxsize=256)
def _plan(n: int, lo_hz: float, hi_hz: float) -> tuple[F64, int, int, F64, npt.NDArray[np.int64]]:
    """What a segment of ``n`` samples and a shaft range share from one read to the next
    (a station reads its speed every 0.32 s): the window, the bins read, the floor's block,
    the candidates and the bin of each one's harmonics ``(HARMONICS, candidates)``."""
    df = LOW_RATE / (n * PAD)
    top = int(TOP_HZ / df) + 1
    cands = np.exp(np.arange(np.log(lo_hz), np.log(hi_hz), STEP))
    h = np.arange(1, HARMONICS + 1)[:, None]
    at = np.minimum(np.rint(cands[None, :] * h / df).astype(np.int64), top - 1)
    for a in (cands, at):
        a.setflags(write=False)
    window = np.hanning(n)
    window.setflags(write=False)
    return window, top, max(1, int(FLOOR_HZ / df)), cands, at


def _medians(blocks: F64) -> F64:
    """Each row's median (an odd row's middle after one partition: what ``np.median``
    returns, without its checks, which cost as much on 88 rows of 81)."""
    k = blocks.shape[1]
    if k % 2 == 0:
        out: F64 = np.median(blocks, axis=1)
        return out
    mid: F64 = np.partition(blocks, k // 2, axis=1)[:, k // 2]
    return mid


def shaft_hz(low: npt.ArrayLike, lo_hz: float, hi_hz: float) -> float:
    """The shaft frequency in ``[lo_hz, hi_hz]`` whose harmonics stand out most in ``low``,
    a segment of a machine's sound at :data:`LOW_RATE` (:func:`low_band`)."""
    x = np.asarray(low, np.float64)
    if not (0.0 < lo_hz < hi_hz and hi_hz * HARMONICS <= TOP_HZ):
        raise InvalidRequest(
            f"a shaft range must be 0 < low < high <= {TOP_HZ / HARMONICS:.0f} Hz, "
            f"got {lo_hz!r}-{hi_hz!r}"
        )
    if x.ndim != 1 or len(x) < MIN_SECONDS * LOW_RATE:
        raise InvalidRequest(f"a shaft speed needs {MIN_SECONDS} s of sound or more")
    n = len(x)
    window, top, block, cands, at = _plan(n, float(lo_hz), float(hi_hz))
    mag = np.abs(np.fft.rfft((x - x.mean()) * window, n * PAD))[:top]
    level = np.log(mag + 1e-12)
    blocks = len(level) // block
    medians = _medians(level[: blocks * block].reshape(blocks, block))
    centres = (np.arange(blocks) + 0.5) * block
    rise = np.maximum(level - np.interp(np.arange(len(level)), centres, medians), 0.0)
    score = np.zeros(len(cands))
    for h in range(HARMONICS):
        score += rise[at[h]]
    return float(cands[int(np.argmax(score))])
