"""New lines in the envelope's spectrum over 1.28 s and 5.12 s: a faint defect the station
never had.

A bearing defect is a train of impacts at its defect rate, each ringing a resonance; the
envelope of a band that holds the resonance then repeats at that rate, and its spectrum has
a comb (a line and its harmonics). Over 200 ms (``rhythm.py``) a faint defect's comb is
lost in the noise and rates under 40 Hz are not resolved at all, yet machines on 9-14 Hz
shafts have defect rates of 25-90 Hz. Over 1.28 s the comb of a defect 20 dB under the
machine stands out (the lines add up over ~40-500 impacts, the noise does not), and the
bins are 0.78 Hz wide.

A machine has combs of its own (a blade pass, a compressor's lobes, the supply's hum), so
the question asked is not "is there a comb" but "is there a comb **the station did not have
while it was enrolled**". Per station:

- every ``STEP`` windows, the last ``WINDOWS`` windows' envelopes (energy per 0.625 ms in
  each of ``CREST_BANDS``, what ``features.py`` computes anyway: 2,048 samples at 1,600 Hz
  per band) are normalised by their mean, Hann-windowed and transformed; each bin's
  magnitude over the band's median bin in ``NORM_HZ``, in log: ``L`` (bands, bins);
- ``new = max(0, L - reference)``, where ``reference`` is, per band and bin, the 95th
  percentile of ``L`` over the enrolment recording's segments: only what rises over
  anything the station did while healthy;
- the statistic: the highest, over bands and over rates ``f`` in ``F_MIN_HZ``-``F_MAX_HZ``,
  of the mean of ``new`` at ``f`` and its harmonics up to ``HARMONICS`` (each the best of
  its bin and the two next to it: slip and speed wander smear a line);
- the same again on ``A``, the mean of ``L`` over the last ``AVERAGE`` segments that do not
  overlap (the newest and those 1.28, 2.56 and 3.84 s before it: 5.12 s, Welch's
  averaging), against a reference and a top of its own: a line stays where it is from one
  segment to the next and the noise does not, so the noise's spread halves and a comb about
  1.5-2 dB fainter stands out (``tests/apps/guard/test_guard_lines.py``), seconds later (the
  mean holds segments from before the onset for up to 5 s). The segment's statistic stays
  for what is strong enough to show at once;
- **a comb must hold its rate**: each candidate rate's comb is taken at its least over the
  last ``HOLD`` evaluations (0.96 s from the first to the newest), the ``j``-th earlier one
  allowed ``j`` rates away (a drive's ramp), and the statistic is the best rate's. A
  defect's rate follows the shaft and holds; the pitch of people talking nearby or a
  passing forklift's firing does not, and a station enrolled on one day heard other voices
  and vehicles than those of the next (docs/guard.md, Session 26: every station enrolled
  on another day, the three validation seeds' false stops fell from 28 (26 stations) to 18
  (15), misses 44 -> 40). The tops are fitted the same way, within each recording;
- how far each is over the station's own highest on its recording (``top``) plus the
  rule's margin, the larger of the two (``Lines.last``); a hit when it is over on
  ``CONSECUTIVE`` evaluations in a row (0.32 s apart); the hit holds until the next
  evaluation.

The mean is there from a station's ``HEARD``-th window (5.12 s) after a start or a reset;
before, the segment's statistic alone decides. A profile of enrolment format /7 (session
24) has no mean: its station runs the segment's statistic only; /7 and /8 (session 25)
profiles have tops for one evaluation and decide on one (``hold`` 1); /9 holds.
``baseline.Baselines`` gives the mean to deaf stations only: it also hears a lasting
difference between two healthy recordings of a motor, and where the detector hears, the
detector stops what it would add (docs/guard.md, Session 25).

The stations take turns (station ``i`` is evaluated when its window count is ``i`` modulo
``STEP``), so a tick does the spectra of a sixteenth of the stations, after the tick's stops
are published (``pipeline.py``): the clause adds stops seconds after a faint onset and never
delays a window's end -> stop. It only adds hits, and only on enrolled stations (format /7,
/8 with the mean, /9 with tops for a held comb).

A station enrolled with its bearing's defect orders (format /10) is also watched at those
orders alone, the shaft speed read from the same 1.28 s of its sound (``orders.py``): each
evaluation's statistic is then the larger of the two clauses' over their own bars. With
format /11 the comb at the orders is also taken unheld, over a bar of its own (the strong
comb, ``orders.py``): over it on ``orders.STRONG_CONSECUTIVE`` evaluations in a row, a hit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.features import CREST_BANDS, HOP, N_SUB, RATE
from rtgate.apps.guard.orders import (
    ORDERS_MARGIN,
    STRONG_CONSECUTIVE,
    BearingOrders,
    OrdersProfile,
    fitted_tops,
    known_combs,
    segment_speed,
)
from rtgate.apps.guard.tickshare import TickShare
from rtgate.core.errors import ConfigError, InvalidRequest

__all__ = [
    "AVERAGE",
    "CONSECUTIVE",
    "F_MAX_HZ",
    "F_MIN_HZ",
    "HARMONICS",
    "HEARD",
    "LINES_MARGIN",
    "STEP",
    "WINDOWS",
    "Lines",
    "LinesProfile",
    "averaged",
    "lines_profile",
    "new_lines",
    "statistic",
]

F32 = npt.NDArray[np.float32]
WINDOWS = 64  # 1.28 s of envelope: 2,048 samples per band, bins of 0.78 Hz
STEP = 16  # windows between a station's evaluations (0.32 s)
AVERAGE = 4  # segments that do not overlap in the mean (5.12 s)
_APART = WINDOWS // STEP  # evaluations between two segments that do not overlap
_SPAN = (AVERAGE - 1) * _APART + 1  # evaluations whose spectra the mean reads
HEARD = AVERAGE * WINDOWS  # windows before a station's first mean
F_MIN_HZ, F_MAX_HZ = 15.0, 260.0  # the defect rates looked for
HARMONICS = 3
NORM_HZ = (15.0, 600.0)  # the bins whose median is a segment's floor
REFERENCE_Q = 0.95  # the reference: this quantile of the recording's segments, per bin
CONSECUTIVE = 2  # evaluations in a row over the bar
HOLD = 4  # evaluations a comb holds its rate through (0.96 s from the first to the last)
LINES_MARGIN = 0.5  # the rules' default margin (chosen on validation seeds, docs/guard.md)
MIN_SEGMENTS = 8  # a recording gives a profile from this many segments on
_T = WINDOWS * N_SUB
_RATE = RATE / (HOP // N_SUB)  # envelope samples per second (1,600)


class _Grid:
    """The constant parts: taper, the floor's bins, the candidates and their harmonics."""

    def __init__(self) -> None:
        self.hann = np.hanning(_T)
        f = np.fft.rfftfreq(_T, 1.0 / _RATE)
        self.bins = len(f)
        self.norm = np.flatnonzero((f >= NORM_HZ[0]) & (f <= NORM_HZ[1]))
        df = f[1]
        k0 = np.arange(int(np.ceil(F_MIN_HZ / df)), int(F_MAX_HZ / df) + 1)
        self.harmonics = [k0 * h for h in range(1, HARMONICS + 1)]
        if self.harmonics[-1][-1] > self.bins - 2:
            raise InvalidRequest("the highest harmonic must have a bin on each side")


_GRID = _Grid()


def log_spectra(envelopes: npt.ArrayLike) -> F32:
    """``L`` of the module doc for envelope segments ``(..., bands, WINDOWS * N_SUB)``:
    ``(..., bands, bins)``."""
    x = np.asarray(envelopes, np.float64)
    if x.shape[-1] != _T:
        raise InvalidRequest(f"a segment is {_T} envelope samples, got {x.shape[-1]}")
    x = x / (x.mean(axis=-1, keepdims=True) + 1e-20)
    x -= x.mean(axis=-1, keepdims=True)
    x *= _GRID.hann
    mag = np.abs(np.fft.rfft(x, axis=-1))
    floor = np.median(mag[..., _GRID.norm], axis=-1, keepdims=True) + 1e-20
    out: F32 = np.log(mag / floor + 1e-9).astype(np.float32)
    return out


def new_lines(spectra: npt.ArrayLike, reference: npt.ArrayLike) -> F32:
    """How far each bin of ``spectra`` ``(..., bands, bins)`` rises over ``reference``
    (broadcast; 0 where it does not), each the best of itself and the two bins next to it
    (slip and speed wander smear a line)."""
    new = np.maximum(np.asarray(spectra, np.float32) - np.asarray(reference, np.float32), 0.0)
    best = new.copy()
    np.maximum(best[..., 1:], new[..., :-1], out=best[..., 1:])
    np.maximum(best[..., :-1], new[..., 1:], out=best[..., :-1])
    return best


def combs(spectra: npt.ArrayLike, reference: npt.ArrayLike) -> F32:
    """Every candidate rate's comb of new lines of ``spectra`` ``(..., bands, bins)`` over
    ``reference`` (broadcast): ``(..., bands, rates)``, the rates from ``F_MIN_HZ`` to
    ``F_MAX_HZ`` one bin apart."""
    return _comb_sums(new_lines(spectra, reference))


def _comb_sums(best: F32) -> F32:
    """:func:`combs` of new lines already taken."""
    acc = best[..., _GRID.harmonics[0]].copy()
    for idx in _GRID.harmonics[1:]:
        acc += best[..., idx]
    acc /= np.float32(HARMONICS)
    return acc


def statistic(spectra: npt.ArrayLike, reference: npt.ArrayLike) -> F32:
    """The comb of new lines of ``spectra`` ``(..., bands, bins)`` over ``reference``
    ``(..., bands, bins)`` (broadcast): one number per leading index, the best rate's."""
    acc = combs(spectra, reference)
    out: F32 = acc.reshape(*acc.shape[:-2], -1).max(axis=-1)
    return out


def _widened(acc: F32, w: int) -> F32:
    """Each rate's best over the ``w`` rates on either side of it."""
    out = acc.copy()
    for k in range(1, w + 1):
        np.maximum(out[..., k:], acc[..., :-k], out=out[..., k:])
        np.maximum(out[..., :-k], acc[..., k:], out=out[..., :-k])
    return out


def held(acc: F32, earlier: Sequence[F32]) -> F32:
    """The statistic of a comb held at one rate: per leading index, the best rate's least
    comb over this evaluation's ``acc`` ``(..., bands, rates)`` and the ``earlier`` ones
    (newest first), the ``j``-th earlier allowed to be ``j`` rates away (a drive's ramp)."""
    cur = acc.copy()
    for j, before in enumerate(earlier, start=1):
        np.minimum(cur, _widened(before, j), out=cur)
    out: F32 = cur.reshape(*cur.shape[:-2], -1).max(axis=-1)
    return out


def held_run(acc: F32) -> F32:
    """:func:`held` over one run's consecutive evaluations ``(S, bands, rates)``: ``(S -
    HOLD + 1,)``, the first for the ``HOLD``-th evaluation."""
    n = len(acc) - HOLD + 1
    if n <= 0:
        return np.zeros(0, np.float32)
    earlier = [acc[HOLD - 1 - j : HOLD - 1 - j + n] for j in range(1, HOLD)]
    return held(acc[HOLD - 1 :], earlier)


def _segments(envelopes: F32, a: int, b: int) -> F32:
    """Every ``STEP`` windows of ``[a, b)`` once it has heard ``WINDOWS``: ``(S, bands, T)``."""
    out = []
    for end in range(a + WINDOWS, b + 1, STEP):
        seg = envelopes[end - WINDOWS : end]  # (WINDOWS, bands, N_SUB)
        out.append(seg.transpose(1, 0, 2).reshape(len(CREST_BANDS), _T))
    if not out:
        return np.zeros((0, len(CREST_BANDS), _T), np.float32)
    return np.stack(out).astype(np.float32)


def averaged(spectra: npt.ArrayLike) -> F32:
    """``A`` of the module doc for one run's consecutive evaluations ``(S, bands, bins)``
    (one every ``STEP`` windows): ``(S - _SPAN + 1, bands, bins)``, the first for the
    evaluation that has heard ``HEARD`` windows."""
    sp = np.asarray(spectra, np.float32)
    n = len(sp) - _SPAN + 1
    if n <= 0:
        return np.zeros((0, *sp.shape[1:]), np.float32)
    acc = sp[:n].copy()
    for k in range(1, AVERAGE):
        acc += sp[k * _APART : k * _APART + n]
    acc *= np.float32(1.0 / AVERAGE)
    return acc


def _check(reference: F32, top: float, segments: int, what: str) -> None:
    ref = np.asarray(reference)
    if ref.shape != (len(CREST_BANDS), _GRID.bins) or not np.isfinite(ref).all():
        raise ConfigError(
            f"the envelope lines' {what}reference must be {len(CREST_BANDS)} x {_GRID.bins} "
            "finite numbers"
        )
    if not (np.isfinite(top) and top >= 0 and segments >= MIN_SEGMENTS):
        raise ConfigError(
            f"the envelope lines' {what}statistic needs a top >= 0 and >= {MIN_SEGMENTS} segments"
        )


def _rounded(reference: F32) -> list[list[float]]:
    return [[round(float(v), 3) for v in band] for band in reference]


@dataclass(frozen=True)
class LinesProfile:
    """A station's envelope spectra while healthy: ``reference`` ``(bands, bins)`` (the
    ``REFERENCE_Q`` quantile of ``L`` over the recording's segments), ``top``, the highest
    statistic of those segments over it, and ``segments``, how many there were; ``mean_*``
    the same for ``A`` (None, 0: a profile of format /7, no mean)."""

    reference: F32
    top: float
    segments: int
    mean_reference: F32 | None = None
    mean_top: float = 0.0
    mean_segments: int = 0
    hold: int = 1
    orders: OrdersProfile | None = None

    def __post_init__(self) -> None:
        _check(self.reference, self.top, self.segments, "")
        if self.mean_reference is not None:
            _check(self.mean_reference, self.mean_top, self.mean_segments, "mean's ")
        if self.hold not in (1, HOLD):
            raise ConfigError(
                f"the envelope lines' tops are for a comb held over {self.hold!r} evaluations; "
                f"this version uses 1 or {HOLD}: enrol the station again"
            )
        if self.orders is not None and self.hold != HOLD:
            raise ConfigError(f"known orders come with tops held over {HOLD} evaluations")
        if self.orders is not None and self.orders.mean_top is not None:
            if self.mean_reference is None:
                raise ConfigError("the known orders' mean top comes with the lines' mean")

    def record(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "windows": WINDOWS,
            "step": STEP,
            "segments": self.segments,
            "top": round(float(self.top), 4),
            "reference": _rounded(self.reference),
        }
        if self.hold > 1:
            out["hold"] = self.hold
        if self.mean_reference is not None:
            out["mean"] = {
                "average": AVERAGE,
                "segments": self.mean_segments,
                "top": round(float(self.mean_top), 4),
                "reference": _rounded(self.mean_reference),
            }
        if self.orders is not None:
            out["orders"] = self.orders.record()
        return out

    @classmethod
    def from_record(cls, data: Mapping[str, Any], where: str) -> LinesProfile:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: the envelope lines must be an object")
        if data.get("windows") != WINDOWS or data.get("step") != STEP:
            raise ConfigError(
                f"{where}: envelope lines over {data.get('windows')!r} windows every "
                f"{data.get('step')!r}; this version uses {WINDOWS} every {STEP}: enrol the "
                "station again"
            )
        mean = data.get("mean")
        if mean is not None and (not isinstance(mean, Mapping) or mean.get("average") != AVERAGE):
            got = mean.get("average") if isinstance(mean, Mapping) else mean
            raise ConfigError(
                f"{where}: envelope lines with a mean of {got!r} segments; this version uses "
                f"{AVERAGE}: enrol the station again"
            )
        try:
            ref = np.asarray(data["reference"], np.float32)
            hold = data.get("hold", 1)
            if isinstance(hold, bool) or not isinstance(hold, int):
                raise ConfigError(f"the envelope lines' hold must be an integer, got {hold!r}")
            orders = data.get("orders")
            known = None
            if orders is not None:
                known = OrdersProfile.from_record(orders, len(CREST_BANDS), where)
            if mean is None:
                return cls(ref, float(data["top"]), int(data["segments"]), hold=hold, orders=known)
            return cls(
                ref,
                float(data["top"]),
                int(data["segments"]),
                np.asarray(mean["reference"], np.float32),
                float(mean["top"]),
                int(mean["segments"]),
                hold,
                known,
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, ConfigError):
                raise ConfigError(f"{where}: {e}") from None
            raise ConfigError(f"{where}: bad envelope lines ({e})") from None


def lines_profile(
    envelopes: npt.ArrayLike,
    spans: Sequence[tuple[int, int]],
    audio: npt.ArrayLike | None = None,
    bearing: BearingOrders | None = None,
) -> LinesProfile | None:
    """The profile of a healthy recording's envelopes ``(windows, bands, N_SUB)`` whose
    ``spans`` are its sources' windows ``[a, b)``; None when they give under
    ``MIN_SEGMENTS`` segments. With ``bearing``, the known orders' tops too
    (``orders.py``), the speed read from ``audio`` (the same windows at ``RATE``)."""
    env = np.asarray(envelopes, np.float32)
    if env.ndim != 3 or env.shape[1:] != (len(CREST_BANDS), N_SUB):
        raise InvalidRequest(f"envelopes must be (windows, {len(CREST_BANDS)}, {N_SUB})")
    runs = [log_spectra(_segments(env, a, b)) for a, b in spans]
    empty = np.zeros((0, len(CREST_BANDS), _GRID.bins), np.float32)
    spectra = np.concatenate([empty, *runs])
    if len(spectra) < MIN_SEGMENTS:
        return None
    reference, top = _fit(runs)
    means = [averaged(r) for r in runs]
    n_means = sum(len(m) for m in means)
    mean = _fit(means) if n_means >= MIN_SEGMENTS else None  # too short: segments only
    known = None
    if bearing is not None:
        speeds = _speeds(audio, len(env), spans, bearing)
        meant = None if mean is None else (means, mean[0])
        known = _orders_fit(runs, reference, speeds, bearing, meant)
    if mean is None:
        return LinesProfile(reference, top, len(spectra), hold=HOLD, orders=known)
    return LinesProfile(reference, top, len(spectra), *mean, n_means, HOLD, known)


def _speeds(
    audio: npt.ArrayLike | None,
    windows: int,
    spans: Sequence[tuple[int, int]],
    bearing: BearingOrders,
) -> list[list[float]]:
    """The shaft speed at each evaluation of each span, from the recording's ``audio``."""
    if audio is None:
        raise InvalidRequest("known orders need the recording's audio (listen keep_audio)")
    x = np.asarray(audio, np.float32).reshape(-1)
    if len(x) < windows * HOP:
        raise InvalidRequest(f"known orders need {windows * HOP} samples of audio, got {len(x)}")
    return [
        [segment_speed(x[(end - WINDOWS) * HOP : end * HOP], RATE, bearing)
         for end in range(a + WINDOWS, b + 1, STEP)]
        for a, b in spans
    ]  # fmt: skip


def _orders_fit(
    runs: Sequence[F32],
    reference: F32,
    speeds: Sequence[Sequence[float]],
    bearing: BearingOrders,
    mean: tuple[Sequence[F32], F32] | None,
) -> OrdersProfile | None:
    """The known orders' tops of healthy spectra (one array per run), the mean's too when
    ``mean`` (the runs' means and their reference) is given; None when no run holds."""
    news = [new_lines(r, reference) for r in runs]
    top, single = fitted_tops(news, speeds, bearing, (HOLD, 1))  # held, the strong comb's
    if top is None:
        return None
    if mean is None:
        return OrdersProfile(bearing, top, single_top=single)
    means, mean_reference = mean
    skip = _SPAN - 1  # the mean's first evaluation is the run's _SPAN-th: its speed
    (mean_top,) = fitted_tops(
        [new_lines(m, mean_reference) for m in means],
        [list(sp)[skip:] for sp in speeds],
        bearing,
        (HOLD,),
    )
    if mean_top is None:
        return OrdersProfile(bearing, top, single_top=single)
    return OrdersProfile(bearing, top, mean_top, single)


def _fit(runs: Sequence[F32]) -> tuple[F32, float]:
    """The reference and the top of healthy spectra, one array of consecutive evaluations
    per run, rounded as the file keeps them (so a station decides alike before and after a
    reload). The top is the highest held statistic within a run (:func:`held_run`); runs
    all too short for it give the single evaluation's (higher: a bar that stops less)."""
    spectra = np.concatenate(list(runs))
    reference = np.round(np.quantile(spectra, REFERENCE_Q, axis=0), 3).astype(np.float32)
    tops = [held_run(combs(r, reference)) for r in runs if len(r) >= HOLD]
    top = max(float(t.max()) for t in tops) if tops else float(statistic(spectra, reference).max())
    return reference, round(top, 4)


class Lines:
    """The clause of the module doc for ``n_streams`` stations, one window at a time.

    ``profiles``: per station its :class:`LinesProfile` (None: never evaluated),
    ``margins`` the rule's margin for the comb at every rate (0: off), ``means`` which
    stations use the mean too (default: every one whose profile has it), and
    ``orders_margins`` the rule's margin for the comb at the station's known bearing orders
    (``orders.py``; default ``ORDERS_MARGIN``, 0: off; only profiles that have them).
    :meth:`step` takes each station's newest window's envelopes ``(N, bands, N_SUB)`` (and
    its audio ``(N, HOP)``, needed when a station has known orders) and returns which
    stations' next window is a hit. ``last`` holds each station's latest statistic over its
    bar (``stat - top - margin``, the largest of its clauses'; -inf before its first
    evaluation).
    """

    def __init__(
        self,
        profiles: Sequence[LinesProfile | None],
        margins: Sequence[float] | npt.ArrayLike | None = None,
        means: Sequence[bool] | npt.ArrayLike | None = None,
        orders_margins: Sequence[float] | npt.ArrayLike | None = None,
        strong_margins: Sequence[float] | npt.ArrayLike | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        n = len(profiles)
        use_mean = np.ones(n, dtype=bool) if means is None else np.asarray(means, dtype=bool)
        if use_mean.shape != (n,):
            raise InvalidRequest(f"{len(use_mean)} mean flags for {n} stations")
        m = _per_station(margins, n, LINES_MARGIN, "lines margins")
        om = _per_station(orders_margins, n, ORDERS_MARGIN, "known orders' margins")
        sm = _per_station(strong_margins, n, 0.0, "strong combs' margins")
        self.n_streams = n
        nb = len(CREST_BANDS)
        every = np.array(
            [p is not None and float(mi) > 0 for p, mi in zip(profiles, m.tolist(), strict=True)],
            dtype=bool,
        )
        self.known = np.array(
            [p is not None and p.orders is not None and float(o) > 0
             for p, o in zip(profiles, om.tolist(), strict=True)],
            dtype=bool,
        )  # fmt: skip
        self.active = every | self.known
        self.bar = np.full(n, np.inf, np.float32)
        self.mean_bar = np.full(n, np.inf, np.float32)
        self._reference = np.zeros((n, nb, _GRID.bins), np.float32)
        self._ring = np.zeros((n, WINDOWS, nb, N_SUB), np.float32)
        # the stations whose spectra are kept for a mean: every-rate (``mean_bar``) or at
        # the known orders (a mean top); ``_slot`` their row in the ring below (-1: none)
        kept = np.zeros(n, dtype=bool)
        mean_refs: list[F32] = []
        for i, p in enumerate(profiles):
            if p is None or not self.active[i]:
                continue
            self._reference[i] = p.reference
            if every[i]:
                self.bar[i] = p.top + float(m[i])
            if p.mean_reference is None:
                continue
            if every[i] and use_mean[i]:
                self.mean_bar[i] = p.mean_top + float(m[i])
            o = p.orders
            kept[i] = np.isfinite(self.mean_bar[i]) or (
                self.known[i] and use_mean[i] and o is not None and o.mean_top is not None
            )
            if kept[i]:
                mean_refs.append(p.mean_reference)
        # the spectra of the last _SPAN evaluations of each kept station, a ring by
        # evaluation count; written once here, so the pages are the process's before the
        # first tick (160 KB a station)
        self._slot = np.where(kept, np.cumsum(kept) - 1, -1)
        self._mean_reference = np.zeros((len(mean_refs), nb, _GRID.bins), np.float32)
        for k, ref in enumerate(mean_refs):
            self._mean_reference[k] = ref
        self._spectra = np.empty((len(mean_refs), _SPAN, nb, _GRID.bins), np.float32)
        self._spectra.fill(0.0)
        # each station's combs of its last HOLD - 1 evaluations (and of its means'), a ring
        # by evaluation count, for the held statistic; a profile of format /7 or /8 decides
        # on one evaluation (hold 1), as it did
        self._hold = np.array([1 if p is None else p.hold for p in profiles], np.int64)
        # (written once here, as the spectra above: no page faults on the first ticks)
        rates = len(_GRID.harmonics[0])
        self._combs = np.empty((n, max(HOLD - 1, 1), nb, rates), np.float32)
        self._combs.fill(0.0)
        self._mean_combs = np.empty((len(mean_refs), max(HOLD - 1, 1), nb, rates), np.float32)
        self._mean_combs.fill(0.0)
        self._orders = _Known(profiles, self.known, om, use_mean, sm)
        self._evals = np.zeros(n, np.int64)
        self._heard = np.zeros(n, np.int64)
        self._phase = np.arange(n) % STEP
        self._run = np.zeros(n, np.int64)
        self._strong_run = np.zeros(n, np.int64)
        self.hot = np.zeros(n, dtype=bool)
        self.last = np.full(n, -np.inf, np.float32)
        self.speed = np.full(n, np.nan, np.float32)  # the last shaft speed read (known orders)
        self.share = TickShare(n, clock)

    def reset(self, stream: int | None = None) -> None:
        """Forget one station's envelopes (or every station's): a new recording."""
        sel = slice(None) if stream is None else stream
        self._heard[sel] = 0
        self._evals[sel] = 0
        self._run[sel] = 0
        self._strong_run[sel] = 0
        self.hot[sel] = False
        self.last[sel] = -np.inf
        self.speed[sel] = np.nan
        self.share.reset(stream)

    def step(
        self,
        envelope: npt.ArrayLike,
        rows: npt.ArrayLike | None = None,
        audio: npt.ArrayLike | None = None,
        deadline: float | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Add each station's newest window (``rows``: which stations, default all, in
        order; ``audio`` their windows, for the known orders' speed); returns whether each
        of them is hot (a hit for its next window). With a ``deadline`` (on ``share``'s
        clock) the evaluations due take what is left until then (``tickshare.py``)."""
        e = np.asarray(envelope, np.float32)
        idx = np.arange(self.n_streams) if rows is None else np.asarray(rows, np.int64)
        if e.shape != (len(idx), len(CREST_BANDS), N_SUB):
            raise InvalidRequest(f"envelope must be ({len(idx)}, {len(CREST_BANDS)}, {N_SUB})")
        heard = self._heard[idx]
        pos = heard % WINDOWS
        self._orders.keep(idx, pos, audio)
        self._ring[idx, pos] = e
        heard = heard + 1
        self._heard[idx] = heard
        ready = self.active[idx] & (heard >= WINDOWS)
        turn = heard % STEP == self._phase[idx]
        self.share.run(idx, turn, ready, self._evaluate, deadline)
        out: npt.NDArray[np.bool_] = self.hot[idx].copy()
        return out

    def _evaluate(self, rows_due: npt.NDArray[np.int64]) -> None:
        """One evaluation of each of these stations (at least one), on its newest
        ``WINDOWS`` windows."""
        start = self._heard[rows_due] % WINDOWS  # each ring's oldest window
        seg = _oldest_first(self._ring[rows_due], start)
        seg = seg.transpose(0, 2, 1, 3).reshape(len(rows_due), len(CREST_BANDS), _T)
        spectra = log_spectra(seg)
        evals, slot = self._evals[rows_due], self._slot[rows_due]
        new = new_lines(spectra, self._reference[rows_due])
        holds = self._hold[rows_due]
        over = _held_step(_comb_sums(new), self._combs, rows_due, evals, holds)
        over -= self.bar[rows_due]
        speeds = self._orders.speeds(rows_due, start)
        self.speed[rows_due] = np.where(np.isnan(speeds), self.speed[rows_due], speeds)
        known = ~np.isnan(speeds)
        strong = np.full(len(rows_due), -np.inf, np.float32)
        if known.any():
            rk = rows_due[known]
            by_orders, strong[known] = self._orders.over(
                rk, new[known], speeds[known], evals[known], mean=False
            )
            over[known] = np.maximum(over[known], by_orders)
        kept = slot >= 0
        self._spectra[slot[kept], evals[kept] % _SPAN] = spectra[kept]
        self._evals[rows_due] = evals + 1
        full = kept & (evals + 1 >= _SPAN)
        if full.any():
            rows_full, slots, newest = rows_due[full], slot[full], evals[full]
            mean = self._spectra[slots, newest % _SPAN]  # a copy: fancy indexing
            for k in range(1, AVERAGE):
                mean += self._spectra[slots, (newest - k * _APART) % _SPAN]
            mean *= np.float32(1.0 / AVERAGE)
            mnew = new_lines(mean, self._mean_reference[slots])
            macc = _comb_sums(mnew)
            count = newest + 1 - _SPAN
            by_mean = _held_step(macc, self._mean_combs, slots, count, holds[full])
            by_mean -= self.mean_bar[rows_full]
            mk = known[full] & self._orders.meaned[rows_full]
            if mk.any():
                by_known, _ = self._orders.over(rows_full[mk], mnew[mk], speeds[full][mk],
                                                count[mk], mean=True)  # fmt: skip
                by_mean[mk] = np.maximum(by_mean[mk], by_known)
            over[full] = np.maximum(over[full], by_mean)
        self.last[rows_due] = over
        run = np.where(over >= 0, self._run[rows_due] + 1, 0)
        self._run[rows_due] = run
        strong_run = np.where(strong >= 0, self._strong_run[rows_due] + 1, 0)
        self._strong_run[rows_due] = strong_run
        self.hot[rows_due] = (run >= CONSECUTIVE) | (strong_run >= STRONG_CONSECUTIVE)


def _per_station(
    values: Sequence[float] | npt.ArrayLike | None, n: int, default: float, what: str
) -> F32:
    """One number per station (``default`` for each when None)."""
    v = np.full(n, default, np.float32) if values is None else np.asarray(values, np.float32)
    if v.shape != (n,):
        raise InvalidRequest(f"{len(v)} {what} for {n} stations")
    return v


def _oldest_first(ring: F32, start: npt.NDArray[np.int64]) -> F32:
    """Each row's ring ``(rows, WINDOWS, ...)`` rolled so its oldest window (``start``)
    comes first."""
    if (start == start[0]).all():  # stations stepped together: one slice each side
        s0 = int(start[0])
        out: F32 = np.concatenate((ring[:, s0:], ring[:, :s0]), axis=1)
        return out
    order = (start[:, None] + np.arange(ring.shape[1])) % ring.shape[1]
    shape = (len(start), ring.shape[1]) + (1,) * (ring.ndim - 2)
    out = np.take_along_axis(ring, order.reshape(shape), axis=1)
    return out


class _Known:
    """The stations' known orders (``orders.py``) inside :class:`Lines`: each one's last
    ``WINDOWS`` windows of audio, its bars per band and the held statistics' rings."""

    def __init__(
        self,
        profiles: Sequence[LinesProfile | None],
        known: npt.NDArray[np.bool_],
        margins: npt.NDArray[np.float32],
        use_mean: npt.NDArray[np.bool_],
        strong_margins: npt.NDArray[np.float32],
    ) -> None:
        n, nb = len(profiles), len(CREST_BANDS)
        self.slot = np.where(known, np.cumsum(known) - 1, -1)
        k = int(known.sum())
        self.bearings: list[BearingOrders] = []
        self.bar = np.full((k, nb), np.inf, np.float32)
        self.mean_bar = np.full((k, nb), np.inf, np.float32)
        self.strong_bar = np.full((k, nb), np.inf, np.float32)  # inf: no strong comb
        self.meaned = np.zeros(n, dtype=bool)
        for i, p in enumerate(profiles):
            if not known[i] or p is None or p.orders is None:
                continue
            o, s = p.orders, int(self.slot[i])
            self.bearings.append(o.bearing)
            self.bar[s] = o.top + margins[i]
            if o.single_top is not None and strong_margins[i] > 0:
                self.strong_bar[s] = o.single_top + strong_margins[i]
            if o.mean_top is not None and use_mean[i]:
                self.mean_bar[s] = o.mean_top + margins[i]
                self.meaned[i] = True
        # written once here, as the rings of Lines (80 KB of audio a station)
        self.audio = np.zeros((k, WINDOWS, HOP), np.float32)
        self.audio.fill(0.0)
        self.held = np.zeros((k, max(HOLD - 1, 1), nb), np.float32)
        self.mean_held = np.zeros((k, max(HOLD - 1, 1), nb), np.float32)

    def keep(
        self, idx: npt.NDArray[np.int64], pos: npt.NDArray[np.int64], audio: npt.ArrayLike | None
    ) -> None:
        """Write the stations' newest window of audio at ring position ``pos``."""
        s = self.slot[idx]
        mine = s >= 0
        if not mine.any():
            return
        if audio is None:
            raise InvalidRequest("stations with known bearing orders need their windows' audio")
        a = np.asarray(audio, np.float32)
        if a.shape != (len(idx), HOP):
            raise InvalidRequest(f"audio must be ({len(idx)}, {HOP}), got {a.shape}")
        self.audio[s[mine], pos[mine]] = a[mine]

    def speeds(self, rows: npt.NDArray[np.int64], start: npt.NDArray[np.int64]) -> F32:
        """The shaft speed over each row's last ``WINDOWS`` windows (NaN: no known orders)."""
        out = np.full(len(rows), np.nan, np.float32)
        s = self.slot[rows]
        mine = np.flatnonzero(s >= 0)
        if not len(mine):
            return out
        seg = _oldest_first(self.audio[s[mine]], start[mine]).reshape(len(mine), -1)
        for j, r in enumerate(mine):
            out[r] = segment_speed(seg[j], RATE, self.bearings[int(s[r])])
        return out

    def over(self, rows: npt.NDArray[np.int64], new: F32, speeds: F32,
             count: npt.NDArray[np.int64], *, mean: bool) -> tuple[F32, F32]:  # fmt: skip
        """The rows' held statistic at their known orders over their bars (the largest
        band's; -inf before the ``HOLD``-th evaluation), and this evaluation's own over the
        strong comb's bars (-inf for the ``mean`` and where there is none): ``new`` their
        new lines, ``count`` which evaluation this is (from 0) of the segment's or
        (``mean``) the mean's."""
        s = self.slot[rows]
        stat = known_combs(new, speeds.tolist(), [self.bearings[int(k)].orders for k in s])
        ring = self.mean_held if mean else self.held
        cur = stat.copy()
        for j in range(1, HOLD):
            np.minimum(cur, ring[s, (count - j) % (HOLD - 1)], out=cur)
        ring[s, count % (HOLD - 1)] = stat
        bar = self.mean_bar if mean else self.bar
        out: F32 = (cur - bar[s]).max(axis=1)
        out[count + 1 < HOLD] = -np.inf
        if mean:
            return out, np.full(len(rows), -np.inf, np.float32)
        single: F32 = (stat - self.strong_bar[s]).max(axis=1)
        return out, single


def _held_step(acc: F32, ring: F32, keys: npt.NDArray[np.int64], count: npt.NDArray[np.int64],
               hold: npt.NDArray[np.int64]) -> F32:  # fmt: skip
    """One evaluation's statistic per row of ``acc`` ``(rows, bands, rates)``: the single
    evaluation's where ``hold`` is 1, else :func:`held` over this and the row's last ``HOLD
    - 1`` combs in ``ring`` (row ``keys``, this the ``count``-th evaluation, from 0; -inf
    before the ``HOLD``-th). Writes this evaluation's combs into the ring."""
    stat: F32 = acc.reshape(len(acc), -1).max(axis=1)
    h = hold > 1
    if h.any():
        k, c = keys[h], count[h]
        earlier = [ring[k, (c - j) % (HOLD - 1)] for j in range(1, HOLD)]
        by_hold = held(acc[h], earlier)
        by_hold[c + 1 < HOLD] = -np.inf
        stat[h] = by_hold
        ring[k, c % (HOLD - 1)] = acc[h]
    return stat
