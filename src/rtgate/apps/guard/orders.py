"""A station's known bearing: the envelope comb at its defect orders (#18, session 35).

The lines clause (``lines.py``) looks for a new comb at every rate from 15 to 260 Hz, some
900 candidates in three bands, and a station's healthy top is the highest of them all: a
faint comb has to beat the luckiest of 900 noises. A rolling bearing strikes only at its
defect *orders* (BPFO, BPFI, 2 x BSF per shaft revolution: its maker's catalogue prints
them; condition-monitoring systems ask for them when a measuring point is set up) times the
shaft speed. A station enrolled with its orders and its shaft's range
(``guard enroll --orders 3.58,5.42,4.70 --shaft-hz 24-34``) looks there alone:

- at each of its evaluations (``lines.STEP`` windows apart), the shaft speed is read from
  the same 1.28 s of its sound (``speed.shaft_hz`` within the range given);
- for each order, the best rate within :data:`TOL` of order x speed; its comb is the mean
  of its first :data:`HARMONICS` harmonics' new lines over the enrolled reference (the lines
  clause's ``new_lines``); a harmonic past the envelope spectrum's end (800 Hz) counts as no
  line, so a fast shaft's high order needs a stronger line: on the project's own motors a
  neighbour's single line near such an order stopped a healthy station (docs/guard.md,
  Session 35); per band, the best order's;
- per band, held at its least over ``lines.HOLD`` evaluations (the rate moves with the read
  speed, so the hold is per band, not per rate);
- the same on the mean of four segments (5.12 s) where the station's detector is deaf, as
  the lines clause does (the mean also hears a lasting difference between two healthy
  recordings);
- over the enrolled top (per band, the highest held statistic of the healthy recording) plus
  the rule's ``orders`` margin (:data:`ORDERS_MARGIN`; twice it where the detector hears,
  as for the lines), on ``lines.CONSECUTIVE`` evaluations in a row: a hit.

The margin was picked on four validation seeds of the outside set, each enrolled on the
scored recording and on another day's, through the whole decision (docs/guard.md, Session
35). The every-rate clause stays beside it as a backstop, at :data:`BACKSTOP` times its
margin (where it stopped no healthy station on those seeds that the orders did not): a wrong
bearing typed in makes this clause deaf, not noisy.

**The strong comb** (format /11, session 36). The hold makes every comb wait four
evaluations (0.96 s) and two in a row more, so a loud defect's comb, there from its first
segment or two, was stopped 1.6 s after its onset at the median. Beside the held statistic,
each evaluation's own (the same comb, not held) is compared with its own top (per band, the
highest one evaluation of the healthy recording reached: ``OrdersProfile.single_top``) plus
the rule's ``strong`` margin (:data:`STRONG_MARGIN`, twice it where the detector hears); over
it on :data:`STRONG_CONSECUTIVE` evaluations in a row, a hit. Picked on the same validation
runs: no healthy station stopped that the orders did not stop already, the median onset ->
stop 1.6 -> 1.2 s; at every rate no margin gained without stopping healthy stations, so the
strong comb is at the known orders only (docs/guard.md, Session 36).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.features import HOP, N_SUB, RATE
from rtgate.apps.guard.speed import HARMONICS as SPEED_HARMONICS
from rtgate.apps.guard.speed import TOP_HZ, low_band, shaft_hz
from rtgate.core.errors import ConfigError, InvalidRequest

__all__ = [
    "HARMONICS",
    "MAX_ORDERS",
    "ORDERS_MARGIN",
    "STRONG_CONSECUTIVE",
    "STRONG_MARGIN",
    "TOL",
    "BearingOrders",
    "OrdersProfile",
    "known_combs",
    "segment_speed",
]

F32 = npt.NDArray[np.float32]
ORDERS_MARGIN = 0.35  # the rules' default (four validation seeds, two days: docs/guard.md)
BACKSTOP = 3.0  # the every-rate lines' margin times this on a station with known orders
STRONG_MARGIN = 1.0  # the strong comb's: the rules' default (validation seeds: docs/guard.md)
STRONG_CONSECUTIVE = 2  # evaluations in a row over the strong comb's bar
TOL = 0.02  # a rate within 2 % of order x the read speed
HARMONICS = 3
MAX_ORDERS = 8
MIN_RATE_HZ = 2.0  # a defect rate under this is not a comb over 1.28 s
ENV_RATE = RATE / (HOP // N_SUB)  # the lines' envelope samples per second (1,600)
SEGMENT = 2048  # envelope samples a segment (lines.WINDOWS * N_SUB; a test holds them equal)


@dataclass(frozen=True)
class BearingOrders:
    """What a user gives for a station's bearing: its defect ``orders`` (per shaft
    revolution) and the shaft's range ``shaft_lo``-``shaft_hi`` in Hz."""

    orders: tuple[float, ...]
    shaft_lo: float
    shaft_hi: float

    def __post_init__(self) -> None:
        o = self.orders
        if not 1 <= len(o) <= MAX_ORDERS or not all(np.isfinite(v) and v > 0 for v in o):
            raise InvalidRequest(f"give 1 to {MAX_ORDERS} defect orders > 0, got {list(o)!r}")
        lo, hi = self.shaft_lo, self.shaft_hi
        top = TOP_HZ / SPEED_HARMONICS
        if not (np.isfinite(lo) and np.isfinite(hi) and 0 < lo < hi <= top):
            raise InvalidRequest(
                f"a shaft range must be 0 < low < high <= {top:.0f} Hz, got {lo!r}-{hi!r}"
            )
        # a rate past the envelope's spectrum (a fast shaft, a high order) has no comb: a
        # range that reaches it somewhere is taken, one that never comes under it is not
        nyquist = ENV_RATE / 2 - 2 * ENV_RATE / SEGMENT  # a bin each side of the highest
        for v in o:
            if v * lo * (1 - TOL) < MIN_RATE_HZ or v * lo * (1 + TOL) > nyquist:
                raise InvalidRequest(
                    f"order {v:g} x the shaft's {lo:g}-{hi:g} Hz strikes at "
                    f"{v * lo:.1f}-{v * hi:.1f} Hz; the envelope's comb is read from "
                    f"{MIN_RATE_HZ:g} to {nyquist:.0f} Hz"
                )

    @classmethod
    def around(
        cls, orders: Sequence[float], shaft_hz: float, low: float = 0.9, high: float = 1.4
    ) -> BearingOrders:
        """``orders`` on a shaft of ``low``-``high`` x a nominal ``shaft_hz`` (a drive's
        range), the top kept where the speed can be read."""
        return cls(tuple(orders), shaft_hz * low, min(shaft_hz * high, TOP_HZ / SPEED_HARMONICS))

    @classmethod
    def parse(cls, orders: str, shaft_hz: str) -> BearingOrders:
        """From the command line: ``"3.58,5.42,4.70"`` (BPFO=3.58 and the like also read)
        and ``"24-34"`` (Hz)."""
        vals = []
        for part in orders.split(","):
            text = part.split("=", 1)[-1].strip()
            try:
                vals.append(float(text))
            except ValueError:
                raise InvalidRequest(f"a defect order must be a number, got {part!r}") from None
        m = re.fullmatch(r"\s*([0-9.]+)\s*-\s*([0-9.]+)\s*", shaft_hz)
        if m is None:
            raise InvalidRequest(f"--shaft-hz must be LOW-HIGH in Hz (24-34), got {shaft_hz!r}")
        try:
            lo, hi = float(m.group(1)), float(m.group(2))
        except ValueError:
            raise InvalidRequest(f"--shaft-hz must be LOW-HIGH in Hz, got {shaft_hz!r}") from None
        return cls(tuple(vals), lo, hi)

    def record(self) -> dict[str, Any]:
        return {"orders": list(self.orders), "shaft_hz": [self.shaft_lo, self.shaft_hi]}

    @classmethod
    def from_record(cls, data: Mapping[str, Any]) -> BearingOrders:
        try:
            lo, hi = data["shaft_hz"]
            return cls(tuple(float(v) for v in data["orders"]), float(lo), float(hi))
        except InvalidRequest as e:
            raise ConfigError(str(e)) from None
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"bad bearing orders ({e!r})") from None


def segment_speed(audio: npt.ArrayLike, rate: int, bearing: BearingOrders) -> float:
    """The shaft speed in ``bearing``'s range over one segment of a station's sound."""
    return shaft_hz(low_band(audio, rate), bearing.shaft_lo, bearing.shaft_hi)


@functools.lru_cache(maxsize=4096)
def _comb_bins(bins: int, k0: int, k1: int) -> tuple[npt.NDArray[np.int64], F32]:
    """The candidate bins ``k0``-``k1``'s harmonics ``(cands, HARMONICS)`` in a spectrum of
    ``bins`` (past the end: clipped) and their weights (1 / ``HARMONICS``, 0 past the end);
    read-only, cached: a station's speed moves little from one evaluation to the next."""
    ks = np.arange(k0, k1 + 1)
    idx = ks[:, None] * np.arange(1, HARMONICS + 1)[None, :]
    fits = idx <= bins - 2
    w = (fits / np.float32(HARMONICS)).astype(np.float32)  # past the end: no line
    at = np.minimum(idx, bins - 2)
    for a in (at, w):
        a.setflags(write=False)
    return at, w


def known_combs(
    new: npt.ArrayLike,
    speeds: Sequence[float],
    orders: Sequence[Sequence[float]],
    tol: float = TOL,
) -> F32:
    """Per row and band, the best comb at the row's ``orders`` times its speed (each rate
    within ``tol``): ``new`` ``(rows, bands, bins)`` (``lines.new_lines``) -> ``(rows,
    bands)``."""
    x = np.asarray(new, np.float32)
    bins = x.shape[-1]
    df = ENV_RATE / (2 * (bins - 1))  # the bins of a real FFT of the segment
    out = np.full(x.shape[:2], -np.inf, np.float32)
    for r, (f0, row_orders) in enumerate(zip(speeds, orders, strict=True)):
        for order in row_orders:
            rate = order * f0
            k0, k1 = int(rate * (1 - tol) / df), int(np.ceil(rate * (1 + tol) / df))
            idx, w = _comb_bins(bins, k0, k1)
            acc = (x[r][:, idx] * w).sum(axis=-1)  # (bands, cands)
            np.maximum(out[r], acc.max(axis=-1), out=out[r])
    return out


def held_bands(stat: F32, hold: int) -> F32:
    """Each band's least over the last ``hold`` evaluations of one run ``(S, bands)``:
    ``(S - hold + 1, bands)``, the first for the ``hold``-th."""
    n = len(stat) - hold + 1
    if n <= 0:
        return np.zeros((0, stat.shape[1]), np.float32)
    out: F32 = np.stack([stat[hold - 1 - j : hold - 1 - j + n] for j in range(hold)]).min(axis=0)
    return out


def _tops(check: Sequence[float], bands: int, what: str) -> F32:
    t = np.asarray(check, np.float32)
    if t.shape != (bands,) or not (np.isfinite(t).all() and (t >= 0).all()):
        raise ConfigError(f"the known orders' {what}top must be {bands} numbers >= 0")
    return t


@dataclass(frozen=True)
class OrdersProfile:
    """A station's bearing and its healthy tops per band: ``top`` for one segment,
    ``mean_top`` for the mean of four (None: the recording was too short for the mean),
    ``single_top`` for one segment's comb not held (the strong comb's, ``lines.py``; None:
    an enrolment of format /10)."""

    bearing: BearingOrders
    top: F32
    mean_top: F32 | None = None
    single_top: F32 | None = None

    def record(self) -> dict[str, Any]:
        out = {**self.bearing.record(), "tol": TOL, "harmonics": HARMONICS}
        tops = {"top": self.top, "mean_top": self.mean_top, "single_top": self.single_top}
        for key, top in tops.items():
            if top is not None:
                out[key] = [round(float(v), 4) for v in top]
        return out

    @classmethod
    def from_record(cls, data: Mapping[str, Any], bands: int, where: str) -> OrdersProfile:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: the known orders must be an object")
        if data.get("tol") != TOL or data.get("harmonics") != HARMONICS:
            raise ConfigError(
                f"{where}: known orders read within {data.get('tol')!r} over "
                f"{data.get('harmonics')!r} harmonics; this version uses {TOL} over "
                f"{HARMONICS}: enrol the station again"
            )
        try:
            bearing = BearingOrders.from_record(data)
            top = _tops(data["top"], bands, "")
            mean = data.get("mean_top")
            single = data.get("single_top")
            return cls(
                bearing,
                top,
                None if mean is None else _tops(mean, bands, "mean's "),
                None if single is None else _tops(single, bands, "single evaluation's "),
            )
        except ConfigError as e:
            raise ConfigError(f"{where}: {e}") from None
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{where}: bad known orders ({e!r})") from None


def fitted_tops(
    news: Sequence[F32],
    speeds: Sequence[Sequence[float]],
    bearing: BearingOrders,
    holds: Sequence[int],
) -> list[F32 | None]:
    """The healthy tops per band, one for each of ``holds``: the highest statistic held
    over that many evaluations within each run (1: not held, the strong comb's), ``news``
    one ``(S, bands, bins)`` array of new lines per run (consecutive evaluations) and
    ``speeds`` their speeds; None for a hold no run is long enough for. The combs are
    read once per run."""
    tops: list[list[F32]] = [[] for _ in holds]
    for new, sp in zip(news, speeds, strict=True):
        stat = known_combs(new, sp, [bearing.orders] * len(new))
        for found, hold in zip(tops, holds, strict=True):
            if len(new) >= hold:
                found.append(held_bands(stat, hold).max(axis=0))
    return [
        np.round(np.max(found, axis=0), 4).astype(np.float32) if found else None for found in tops
    ]
