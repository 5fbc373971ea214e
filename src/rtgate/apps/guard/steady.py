"""A steady rise of the high bands, vectorised over stations: the persist and quick clauses.

A bearing's impacts ring the high log-mel bands in nearly every 20 ms window once the
defect is there; a knock or a benign impact rings one or two. So the statistic is a
*median*: per station and high band, the median of ``z`` (the feature over the station's
enrolled mean, in its spread) over the last ``windows`` windows, over the highest that median
reached on the station's healthy recording (its scale, fitted by ``enrol.steady_range`` with
the same ``windows``); then the second-highest of the high bands (a bearing's impacts are
broadband up there, a tone is one band). A window is a hit when it reaches the station's bar
while

- the low bands have been calm (their slow average under ``SLOW_VETO`` times its own range,
  the caller's ``calm``) for the last ``hold`` windows: a vehicle passing or a change of
  speed moves the whole spectrum, and its ring must have left the median first;
- no mid band's median (``PERSIST_MID``, the bands just under the high ones) is ``mid_veto``
  times over its own: a rise across 4-8 kHz alike is a hiss, where a bearing's impacts lift
  the top bands far more than those under them;
- with ``low_veto`` (the quick clause), no low band's median over the same ring is that many
  times over its own: the slow average needs several windows to cross its veto when a
  vehicle arrives or the speed changes, and a short ring is over its bar within two.

Two instances run in ``baseline.Baselines``: the persist clause (31 windows, 0.62 s,
Session 14) and the quick clause (a few windows, Session 38), each with its own scale, bar
and hold. A ring can be read more than once (:meth:`Steady.read_also`, a :class:`Reading`:
its own gains, bars and vetoes over the same rings, medians and hold): the quick clause in
decibels (Session 39) is a second reading of the quick clause's ring. It gives each band a
bias (``high_bias``, ``low_bias``) taken off the median once it is scaled, so with the gain at
the band's spread in decibels (``10 / ln 10 * sd``) and the bias at its own highest median
times the same, the statistic is how many decibels the median stands over the highest it
reached on the healthy recording (a median commutes with a shift and a positive scale). A
station without a clause (no scale, or a bar of 0) has an infinite bar there and never hits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from rtgate.core.errors import InvalidRequest

__all__ = ["Reading", "Steady"]

F32 = npt.NDArray[np.float32]
Rows = npt.NDArray[np.int64]


def _median_last(x: F32) -> F32:
    """The median over the last axis (of odd length), a new array without it."""
    k = x.shape[-1] // 2
    out: F32 = np.partition(x, k, axis=-1)[..., k]
    return out


def _second_highest(x: F32) -> F32:
    """Per row, the second-highest value (a new array)."""
    k = x.shape[1] - 2
    out: F32 = np.partition(x, k, axis=1)[:, k]
    return out


@dataclass(frozen=True, slots=True)
class Reading:
    """One statistic read off a steady rise's rings, per station: its bar (``threshold``,
    ``inf``: off), the gain (``high_inv``) and ``high_bias`` of each high band's median, the
    mid bands' gain and veto, the low bands' gain, bias and veto (``low_inv`` None: no low
    veto); :attr:`last` is the statistic of the last window."""

    threshold: F32
    high_inv: F32
    mid_inv: F32
    mid_veto: np.float32
    low_inv: F32 | None
    low_veto: np.float32
    high_bias: F32 | None
    low_bias: F32 | None
    last: F32

    @property
    def clause(self) -> bool:
        """Whether any station has this reading's bar."""
        return bool(np.isfinite(self.threshold).any())


class Steady:
    """The steady-rise statistic of ``n`` stations over a ring of ``windows`` windows.

    ``bars``: per station, the bar (``inf``: off); ``high_inv``, ``mid_inv``: per station,
    one over the scale of each high and each mid band (zeros where off); ``hold``: windows
    the low bands must have been calm; ``mid_veto``: the mid bands' veto, in their scale;
    ``warmup``: windows after a reset before a hit: the low bands' slow average starts at 0
    and needs about ``1 / SLOW_ALPHA`` windows before its veto can see a vehicle or a new
    speed (a short ring is full long before); ``low_inv``: per station, one over the scale
    of each low band, whose median over the ring must stay under ``low_veto`` (None: no such
    veto, and no ring of the low bands); ``high_bias``, ``low_bias``: per station, what is
    taken off each high (low) band's scaled median (None: nothing). These make the first
    :class:`Reading`; :meth:`read_also` adds others over the same rings.
    """

    def __init__(
        self,
        windows: int,
        hold: int,
        mid_veto: float,
        bars: F32,
        high_inv: F32,
        mid_inv: F32,
        warmup: int = 0,
        low_inv: F32 | None = None,
        low_veto: float = float("inf"),
        high_bias: F32 | None = None,
        low_bias: F32 | None = None,
    ) -> None:
        n = bars.shape[0]
        if windows < 1 or windows % 2 == 0:
            raise InvalidRequest(f"a steady rise needs an odd number of windows, got {windows}")
        if high_inv.shape[0] != n or mid_inv.shape[0] != n or high_inv.shape[1] < 2:
            raise InvalidRequest("a steady rise needs a scale per station and >= 2 high bands")
        if hold < 1 or warmup < 0:
            raise InvalidRequest(f"a steady rise needs hold >= 1, warmup >= 0: {hold}, {warmup}")
        self.windows, self.hold, self.warmup = windows, hold, warmup
        # the rings of the high, the mid and the low bands' z (station, band, window)
        self._ring = np.zeros((n, high_inv.shape[1], windows), np.float32)
        self._ring_mid = np.zeros((n, mid_inv.shape[1], windows), np.float32)
        lows = 0 if low_inv is None else low_inv.shape[1]
        self._ring_low = np.zeros((n, lows, windows), np.float32)
        self._low = low_inv is not None  # whether the low bands are kept
        self._readings: list[Reading] = []
        first = self.read_also(
            bars, high_inv, mid_inv, mid_veto, low_inv, low_veto, high_bias, low_bias
        )
        self.threshold, self.last = first.threshold, first.last
        self._work = np.zeros_like(self._ring)
        self._pos = np.zeros(n, np.int64)  # where each station's next window goes
        # windows since the low veto (or, less the warm-up, since the reset)
        self._calm_run = np.full(n, hold - warmup, np.int64)
        self._rows = np.arange(n)

    def read_also(
        self,
        bars: F32,
        high_inv: F32,
        mid_inv: F32,
        mid_veto: float = float("inf"),
        low_inv: F32 | None = None,
        low_veto: float = float("inf"),
        high_bias: F32 | None = None,
        low_bias: F32 | None = None,
    ) -> Reading:
        """Another statistic over the same rings, medians, hold and warm-up (the arguments as
        the constructor's); its hits join the others'. A low veto needs the first reading's
        (the ring of the low bands)."""
        if bars.shape[0] != self._ring.shape[0] or high_inv.shape != self._ring.shape[:2]:
            raise InvalidRequest("a reading needs a bar per station and a gain per high band")
        if mid_inv.shape != self._ring_mid.shape[:2]:
            raise InvalidRequest("a reading needs a gain per station and mid band")
        if low_inv is not None and (not self._low or low_inv.shape != self._ring_low.shape[:2]):
            raise InvalidRequest("a reading's low veto needs the ring of the low bands")
        for bias, like, what in ((high_bias, high_inv, "high"), (low_bias, low_inv, "low")):
            if bias is not None and (like is None or bias.shape != like.shape):
                raise InvalidRequest(f"a steady rise's {what} biases need one per station and band")
        r = Reading(
            bars.astype(np.float32),
            high_inv.astype(np.float32),
            mid_inv.astype(np.float32),
            np.float32(mid_veto),
            None if low_inv is None else low_inv.astype(np.float32),
            np.float32(low_veto),
            None if high_bias is None else high_bias.astype(np.float32),
            None if low_bias is None else low_bias.astype(np.float32),
            np.zeros(bars.shape[0], np.float32),
        )
        self._readings.append(r)
        return r

    @property
    def clause(self) -> bool:
        """Whether any station has a bar in any reading."""
        return any(r.clause for r in self._readings)

    @property
    def readings(self) -> tuple[Reading, ...]:
        return tuple(self._readings)

    def push(self, high: F32, mid: F32, low: F32, rows: Rows | None = None) -> None:
        """Add the newest window's high, mid and low bands' ``z`` of ``rows`` (default all;
        the low ones are kept only with a low veto)."""
        if rows is None:
            self._ring[self._rows, :, self._pos] = high
            self._ring_mid[self._rows, :, self._pos] = mid
            if self._low:
                self._ring_low[self._rows, :, self._pos] = low
            self._pos += 1
            self._pos %= self.windows
            return
        pos = self._pos[rows]
        self._ring[rows, :, pos] = high
        self._ring_mid[rows, :, pos] = mid
        if self._low:
            self._ring_low[rows, :, pos] = low
        self._pos[rows] = (pos + 1) % self.windows

    def _vetoed(self, r: Reading, rows: Rows) -> npt.NDArray[np.bool_]:
        """Which of ``rows`` the mid bands' (or the low bands') median vetoes in ``r``."""
        out = np.zeros(len(rows), dtype=bool)
        if np.isfinite(r.mid_veto):
            m = _median_last(self._ring_mid[rows]) * r.mid_inv[rows]
            out |= m.max(axis=1) >= r.mid_veto
        if r.low_inv is not None:
            low = _median_last(self._ring_low[rows]) * r.low_inv[rows]
            if r.low_bias is not None:
                low -= r.low_bias[rows]
            out |= low.max(axis=1) >= r.low_veto
        return out

    def hits(self, calm: npt.NDArray[np.bool_], rows: Rows | None = None) -> npt.NDArray[np.bool_]:
        """Which of ``rows`` (default all) are hits this window in any reading; ``calm``:
        whether each one's low bands are under their veto this window. Sets each reading's
        ``last`` (a reading no station has is skipped)."""
        if rows is None:
            work = self._work
            np.copyto(work, self._ring)
            work.partition(self.windows // 2, axis=2)
            med = work[:, :, self.windows // 2]
            self._calm_run += 1
            self._calm_run[~calm] = 0
            run, idx = self._calm_run, self._rows
        else:
            med = _median_last(self._ring[rows])
            run = np.where(calm, self._calm_run[rows] + 1, 0)
            self._calm_run[rows] = run
            idx = rows
        sel = slice(None) if rows is None else rows  # a view of every station, not a copy
        held = run >= self.hold
        out = np.zeros(len(idx), dtype=bool)
        for r in self._readings:
            if not r.clause:
                continue
            scaled = med * r.high_inv[sel]
            if r.high_bias is not None:
                scaled -= r.high_bias[sel]
            v = _second_highest(scaled)
            r.last[sel] = v
            over = (v >= r.threshold[sel]) & held
            due = np.flatnonzero(over)
            if len(due):  # the vetoes, only where the high bands reach the bar
                over[due] = ~self._vetoed(r, idx[due])
            out |= over
        return out

    def reset(self, stream: int | None = None) -> None:
        """Forget one station's windows (or all): a new recording."""
        sel = slice(None) if stream is None else stream
        self._ring[sel] = 0.0
        self._ring_mid[sel] = 0.0
        self._ring_low[sel] = 0.0
        self._pos[sel] = 0
        self._calm_run[sel] = self.hold - self.warmup
