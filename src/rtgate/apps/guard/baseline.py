"""A station's own normal (its enrolment) and how the stop path uses it, for many stations.

``guard enroll`` listens to a healthy station and keeps, per feature of the detector's input,
the mean and the spread, how far a slow average of the features strayed from that mean
(``novelty_scale``), and the range of the general detector's logit on the recording
(``detector_logit``: the detector's calibration on this station). At run time, per window
and station (:class:`Baselines`, vectorised over stations, a few array operations per tick):

- ``z = (features - mean) / sd``; ``m += ALPHA * (z - m)`` (an average over ~5 windows);
- novelty ``r = max(m) / novelty_scale``: 1 is the most the healthy recording reached; one
  sided, since a defect adds energy and impulsiveness (less of it is no bearing fault);
- gate ``g = clip((r - GATE_LOW) / (GATE_HIGH - GATE_LOW), 0, 1)``;
- the calibration: the detector's logit ``d`` less ``c = max(0, q - T)``, where ``q`` is the
  99.9th percentile of its logit on the healthy recording and ``T`` the logit of the rule's
  threshold: 0 for a station the detector was not sure about while enrolling, and for one
  it was (an ``--accept-stops`` enrolment) the detector must be surer than on that
  recording;
- the logit the rules see: ``d - c + BOOST * g - shift * (1 - g)``: on a window that
  sounds like the station's normal the detector must be surer, on one the station has never
  sounded like it may be a little less sure;
- a **deaf** station: one whose healthy recording had the detector at or over the rule's
  threshold on more than 1 % of its windows (its logit's 99th percentile over ``T``). The
  detector is out of its domain there (on the outside machines it calls most healthy
  windows faults, logit 8-12), and its calibrated logit crosses the line on any drift: a
  deaf station's detector makes no hit at all. The logit the rules see is then the
  station's own evidence, ``T + EVIDENCE_SLOPE * e`` with ``e`` its persist statistic over
  the bar less 1 or its envelope lines over their bar in margins (``lines.py``), kept
  ``DEAF_GAP`` under ``T``: it ranks the windows (the AUC of the reports) while the hits are
  those of the station's own clauses. Session 24 (docs/guard.md) measured it and removed
  the rise over the detector's slow average that calibrated stations had (false stops on
  babble; the lines catch the faults it caught).

The bound: ``q`` is at most ``LOGIT_BOUND`` (a file beyond it is refused) and the move of
the logit stays in ``[-(LOGIT_BOUND - T) - SHIFT_MAX, BOOST]``; without a calibration (files
of format /1 and /2, and every station the detector was not sure about) in
``[-SHIFT_MAX, BOOST]``, as before the calibration: 0.92 becomes 0.981 and 0.995 becomes
0.9989 on a normal-sounding window. An enrolment made on a recording the detector stopped
on therefore absorbs what was there (``enroll`` refuses it unless told otherwise); a rise of
the detector over that range, or over its own recent level, still stops.

The rhythm (``rhythm.py``): the enrolment also keeps the station's healthy range of the
envelope's rhythm statistic (its highest value and quantiles over the recording). A station
whose rule has a rhythm clause (``Rule.rhythm``, a margin; off by default, ``RHYTHM_MARGIN``
is the one chosen on validation) counts a window whose statistic reaches
``max(highest healthy + margin, RHYTHM_FLOOR)`` as a hit, whatever the detector's score.

The station's own model (``station_model.py``, ``enroll --station-model``, off by default):
per window and station one dot product of the clipped ``z`` and ``m`` with its weights; a
window over its bar is a hit for the rules (``last_novel``, beside the novelty clause's), so
the station stops when ``k`` of the last ``n`` windows are hits of the detector or of its
own model.

The slow range (``enroll --slow-range``, format /5; the rules' ``slow`` clause, off by
default, ``SLOW_BAR`` the bar chosen on validation; Session 13): per feature, the highest the
slow average of ``z`` (``SLOW_ALPHA``, about 20 windows) reached on the healthy recording
(``slow_scale``, at least ``SLOW_FLOOR``). With the clause, per window and station:
``ms += SLOW_ALPHA (z - ms)``, the statistic ``max(ms / slow_scale)`` over the high log-mel
bands (``SLOW_HIGH``, centres 5.7-7.5 kHz, where a bearing's impacts ring whatever the
machine), and a hit when it reaches the rule's bar while no low band (``SLOW_LOW``) is over
``SLOW_VETO`` times its own range (a forklift passing, a change of speed: the whole
spectrum moves). It only adds hits.

The steady rise (format /6, Session 14; the rules' ``persist`` clause, on by default at
``PERSIST_BAR``): the same high bands, but the *median* of each band's ``z`` over the last
``PERSIST_WINDOWS`` windows against the highest that median reached on the healthy recording
(``persist_scale``, at least ``PERSIST_FLOOR``), the second-highest of the five bands (a
bearing's impacts are broadband up there; one band alone may be a tone). A bearing fault
puts impacts in nearly every 20 ms window and moves the median; a handling knock or a benign
impact moves one or two windows of the ring and not its median, where it moves an average by
its whole size. Two vetoes: the slow clause's (the low bands' slow average over
``SLOW_VETO`` times their own range: a vehicle, a change of speed) and the bands just under
the high ones (``PERSIST_MID``, 4.0-5.4 kHz) with their own median over ``PERSIST_MID_VETO``
times their range: a rise across 4-8 kHz alike is a hiss (compressed air), where a bearing's
impacts lift the top bands far more than those under them. The low bands' veto holds for
``PERSIST_HOLD`` windows after it lifts (Session 15), so that most of the ring is past it:
the median remembers the last ``PERSIST_WINDOWS`` windows, the slow average forgets faster,
and without the hold a vehicle's pass still in the ring's median was a hit once the average
had let go (a spindle with a forklift's reversing beeper, outside seed 20261204). It only
adds hits.

The quick rise (format /12, Session 38; the rules' ``quick`` clause, on by default at
``QUICK_BAR``): the same statistic over the last ``QUICK_WINDOWS`` windows (60 ms) against
its own range (``quick_scale``), under the same vetoes plus the low bands' own median over
those windows (``QUICK_LOW_VETO``: the slow average is too slow for a ring this short), and
not in a run's first ``QUICK_WARMUP`` windows. Both rises are ``steady.Steady``. It only
adds hits.

The quick rise in decibels (the same /12 range; the rules' ``quick_db`` clause, on by
default at ``QUICK_DB_BAR``; Session 39): the same 3-window median, but per band in decibels
over the highest it reached on the healthy recording (``(median z - quick_scale) * sd *
10 / ln 10``), the second-highest of the high bands at the bar, vetoed while a low band's
short median stands ``QUICK_DB_LOW_VETO`` decibels over its own highest (no mid veto), with
the same hold and warm-up. A ratio of ``z`` asks a band whose healthy median wandered far
(a fan's impacts, a drive's whine) to rise far more decibels than a quiet one; the decibels
ask the same of every band. It only adds hits.

Files (:class:`EnrolmentStore`): one JSON file per station in a directory: the numbers, the
provenance of the recording and the detector they belong to. Format /3 added
``detector_logit``; files of format /1 and /2 load without it and decide as before it.
Format /4 is /3 with ``station_model`` (its weights, bias, bar and their sha256: a file whose
numbers do not match is refused); an enrolment without one is still written as /3. Format
/5 is /3, or /4, with ``slow`` (``alpha`` and ``scale``, the slow range). Format /6 is /5
with ``persist`` (``windows`` and ``scale``: the median's range per feature). The
directory is ``--enrolments DIR``, else ``$RTGATE_GUARD_ENROLMENTS``, else
``$XDG_DATA_HOME/rtgate/enrolments`` (``~/.local/share/rtgate/enrolments``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.detector import logit_of
from rtgate.apps.guard.features import N_FEATURES
from rtgate.apps.guard.lines import Lines, LinesProfile
from rtgate.apps.guard.orders import BACKSTOP
from rtgate.apps.guard.paths import user_data_path
from rtgate.apps.guard.station_model import Z_CLIP, StationModel
from rtgate.apps.guard.steady import Steady
from rtgate.core.errors import ConfigError, InvalidRequest

__all__ = [
    "ALPHA",
    "BOOST",
    "DEAF_GAP",
    "EVIDENCE_SLOPE",
    "FORMAT",
    "FORMATS",
    "FORMAT_HELD",
    "FORMAT_LINES",
    "FORMAT_MEAN",
    "FORMAT_MODEL",
    "FORMAT_QUICK",
    "FORMAT_SLOW",
    "FORMAT_STEADY",
    "FORMAT_STRONG",
    "GATE_HIGH",
    "GATE_LOW",
    "LINES_HEARING",
    "LOGIT_BOUND",
    "PERSIST_BAR",
    "PERSIST_FLOOR",
    "PERSIST_HOLD",
    "PERSIST_MID",
    "PERSIST_MID_VETO",
    "PERSIST_WINDOWS",
    "QUICK_BAR",
    "QUICK_DB_BAR",
    "QUICK_DB_LOW_VETO",
    "QUICK_HOLD",
    "QUICK_LOW_VETO",
    "QUICK_WARMUP",
    "QUICK_WINDOWS",
    "RHYTHM_FLOOR",
    "RHYTHM_MARGIN",
    "SHIFT_MAX",
    "SLOW_ALPHA",
    "SLOW_BAR",
    "SLOW_FLOOR",
    "SLOW_HIGH",
    "SLOW_LOW",
    "SLOW_VETO",
    "Baselines",
    "Enrolment",
    "EnrolmentStore",
    "default_enrolment_dir",
    "detector_identity",
]

F32 = npt.NDArray[np.float32]
FORMAT = "rtgate-guard-enrolment/3"  # /2 added the rhythm's range, /3 the detector's
FORMAT_MODEL = "rtgate-guard-enrolment/4"  # /4: /3 and the station's own model
FORMAT_SLOW = "rtgate-guard-enrolment/5"  # /5: /3 or /4 and the slow range per feature
FORMAT_STEADY = "rtgate-guard-enrolment/6"  # /6: /5 and the running median's range
FORMAT_LINES = "rtgate-guard-enrolment/7"  # /7: /6 and the envelope's lines (lines.py)
FORMAT_MEAN = "rtgate-guard-enrolment/8"  # /8: /7 and the lines' mean over 5.12 s
FORMAT_HELD = "rtgate-guard-enrolment/9"  # /9: /7 or /8, tops for a comb held at one rate
FORMAT_ORDERS = "rtgate-guard-enrolment/10"  # /10: /9 and the bearing's orders (orders.py)
FORMAT_STRONG = "rtgate-guard-enrolment/11"  # /11: /10 and the strong comb's tops (orders)
FORMAT_QUICK = "rtgate-guard-enrolment/12"  # /12: /9, /10 or /11 and the quick median's range
_HELD = (FORMAT_HELD, FORMAT_ORDERS, FORMAT_STRONG, FORMAT_QUICK)
_LINED = (FORMAT_LINES, FORMAT_MEAN, *_HELD)  # the formats with each part
_STEADIED = (FORMAT_STEADY, *_LINED)
_SLOWED = (FORMAT_SLOW, *_STEADIED)
FORMATS = (
    "rtgate-guard-enrolment/1",
    "rtgate-guard-enrolment/2",
    FORMAT,
    FORMAT_MODEL,
    FORMAT_SLOW,
    FORMAT_STEADY,
    FORMAT_LINES,
    FORMAT_MEAN,
    FORMAT_HELD,
    FORMAT_ORDERS,
    FORMAT_STRONG,
    FORMAT_QUICK,
)
ALPHA = 0.2  # the novelty's average: about 5 windows (0.1 s)
GATE_LOW, GATE_HIGH = 0.6, 1.0  # novelty at which the shift starts and stops giving way
SHIFT_MAX = 1.5  # logit: 0.92 -> 0.981, 0.995 -> 0.9989
BOOST = 1.0  # logit: on a novel window 0.92 -> 0.81
LOGIT_BOUND = 16.0  # the calibration's q at most (a file beyond it is refused)
DEAF_GAP = 0.01  # logit: a deaf station's score stays this far under its threshold
EVIDENCE_SLOPE = 4.0  # logit per unit of a deaf station's own evidence over its bars
LINES_HEARING = 2.0  # the lines' margin times this on a station whose detector hears
SD_FLOOR = 0.05  # a feature that barely moved while enrolling is not taken as exact
NOVELTY_FLOOR = 1.0  # in units of sd: a very steady recording does not make all novel
RHYTHM_FLOOR = 3.5  # the rhythm clause never fires under this, however quiet the recording
RHYTHM_MARGIN = 0.5  # the rules' rhythm margin chosen on validation (off by default)
SLOW_ALPHA = 0.05  # the slow average of z: about 20 windows (0.4 s)
SLOW_FLOOR = 0.5  # in units of sd: the least a feature's slow range is taken to be
SLOW_BAR = 6.0  # the rules' slow bar chosen on validation (Session 13; off by default)
SLOW_HIGH = slice(35, 40)  # the log-mel bands it watches (centres 5.7-7.5 kHz): impacts ring
SLOW_LOW = slice(0, 30)  # the bands that veto it (centres up to 3.8 kHz)
SLOW_VETO = 1.5  # no slow hit while a low band's slow average is this far over its own
PERSIST_WINDOWS = 31  # the running median of the high bands' z: the last 31 windows (0.62 s)
PERSIST_FLOOR = 0.5  # in units of sd: the least a feature's median range is taken to be
PERSIST_BAR = 6.0  # the rules' persist bar (Session 14; on by default)
PERSIST_MID = slice(30, 35)  # the bands under the high ones (centres 4.0-5.4 kHz) that veto it
PERSIST_MID_VETO = 3.0  # no persist hit while a mid band's median is this far over its own
PERSIST_HOLD = PERSIST_WINDOWS // 2 + 1  # windows the low veto holds after it lifts
QUICK_WINDOWS = 3  # the quick clause's median: the last 3 windows (60 ms; Session 38)
QUICK_HOLD = QUICK_WINDOWS // 2 + 1  # windows the low veto holds for it
QUICK_BAR = 3.0  # the rules' quick bar (Session 38)
QUICK_WARMUP = round(1 / SLOW_ALPHA)  # no quick hit in a run's first 20 windows (its veto)
QUICK_LOW_VETO = 3.0  # no quick hit while a low band's short median is this far over its own
QUICK_DB_BAR = 8.0  # the rules' quick_db bar: decibels over the band's own highest (Session 39)
QUICK_DB_LOW_VETO = 3.0  # no quick_db hit while a low band's short median is this many dB over
DB = float(10.0 / np.log(10.0))  # decibels of energy per natural-log unit of a log-mel band


def default_enrolment_dir() -> Path:
    """``$RTGATE_GUARD_ENROLMENTS``, else ``$XDG_DATA_HOME/rtgate/enrolments``."""
    return user_data_path("RTGATE_GUARD_ENROLMENTS", "enrolments")


def detector_identity(model_path: str | Path, info: Mapping[str, Any]) -> dict[str, Any]:
    """What an enrolment records of the detector it was made with: the ONNX file's sha256
    (what :class:`EnrolmentStore` compares) and the training digest."""
    p = Path(model_path)
    try:
        sha = hashlib.sha256(p.read_bytes()).hexdigest()
    except OSError as e:
        raise ConfigError(f"cannot read detector model {p}: {e.strerror or e}") from e
    return {"file": p.name, "sha256": sha, "digest": info.get("digest")}


def _median_range(model: Mapping[str, Any], key: str, windows: int, fmt: str, where: str) -> F32:
    """A steady rise's range from a file (``"persist"`` or ``"quick"``): its scale, refused
    when missing or measured over another number of windows than this version's."""
    part = model.get(key)
    if not isinstance(part, dict):
        raise ConfigError(f"{where}: a file of format {fmt} needs a {key} median range")
    if part.get("windows") != windows:
        raise ConfigError(
            f"{where}: a {key} median over {part.get('windows')!r} windows; this version "
            f"uses {windows}: enrol the station again"
        )
    return _vector(part, "scale", where)


def _vector(data: Mapping[str, Any], key: str, where: str) -> F32:
    v = np.asarray(data.get(key, ()), dtype=np.float64)
    if v.shape != (N_FEATURES,) or not np.isfinite(v).all():
        raise ConfigError(f"{where}: {key!r} must be {N_FEATURES} finite numbers")
    return v.astype(np.float32)


@dataclass(frozen=True)
class Enrolment:
    """One station's normal, as ``guard enroll`` measured it.

    ``mean``, ``sd``: per input feature; ``novelty_scale``: the highest novelty of the
    recording (see the module doc); ``shift``: how much surer (logit) the detector must be on
    a window that sounds normal, in ``[0, SHIFT_MAX]``. ``provenance``: the recording and the
    detector; ``general``: what the general detector did on the recording; ``rhythm``: the
    rhythm statistic's healthy range (``max``, ``p999``, ``p50``, ``windows``; empty for a
    file of format /1: that station runs without the rhythm clause); ``detector_logit``: the
    general detector's logit on the recording (``max``, ``p999``, ``p99``, ``p50``,
    ``windows``, each at most ``LOGIT_BOUND``; empty for formats /1 and /2: no calibration).
    """

    station: str
    mean: F32
    sd: F32
    novelty_scale: float
    shift: float
    provenance: Mapping[str, Any] = field(default_factory=dict)
    general: Mapping[str, Any] = field(default_factory=dict)
    created: str = ""
    rhythm: Mapping[str, float] = field(default_factory=dict)
    detector_logit: Mapping[str, float] = field(default_factory=dict)
    station_model: StationModel | None = None
    slow_scale: F32 | None = None
    slow_alpha: float = SLOW_ALPHA
    persist_scale: F32 | None = None
    lines: LinesProfile | None = None
    quick_scale: F32 | None = None

    def __post_init__(self) -> None:
        where = f"enrolment of {self.station!r}"
        if np.shape(self.mean) != (N_FEATURES,) or np.shape(self.sd) != (N_FEATURES,):
            raise ConfigError(f"{where}: mean and sd must have {N_FEATURES} values")
        if not (np.isfinite(self.mean).all() and np.all(np.asarray(self.sd) >= SD_FLOOR)):
            raise ConfigError(f"{where}: mean must be finite and sd >= {SD_FLOOR}")
        if not (math.isfinite(self.novelty_scale) and self.novelty_scale >= NOVELTY_FLOOR):
            raise ConfigError(f"{where}: novelty_scale must be >= {NOVELTY_FLOOR}")
        if not 0.0 <= self.shift <= SHIFT_MAX:
            raise ConfigError(f"{where}: shift {self.shift!r} outside [0, {SHIFT_MAX}]")
        top = self.rhythm.get("max") if self.rhythm else None
        if self.rhythm and not (isinstance(top, int | float) and math.isfinite(top)):
            raise ConfigError(f"{where}: the rhythm's range needs a finite max")
        if self.detector_logit:
            vals = [self.detector_logit.get(k) for k in ("max", "p999", "p50")]
            if not all(isinstance(v, int | float) and abs(v) <= LOGIT_BOUND for v in vals):
                raise ConfigError(
                    f"{where}: the detector's logit range needs max, p999 and p50 in "
                    f"[-{LOGIT_BOUND:g}, {LOGIT_BOUND:g}]"
                )
        if self.slow_scale is not None:
            sc = np.asarray(self.slow_scale)
            if sc.shape != (N_FEATURES,) or not (np.isfinite(sc).all() and sc.min() >= SLOW_FLOOR):
                raise ConfigError(
                    f"{where}: the slow range needs {N_FEATURES} numbers >= {SLOW_FLOOR}"
                )
            if not 0.0 < self.slow_alpha <= 1.0:
                raise ConfigError(f"{where}: the slow average's alpha must be in (0, 1]")
        if self.persist_scale is not None:
            ps = np.asarray(self.persist_scale)
            if self.slow_scale is None:
                raise ConfigError(f"{where}: the median's range needs the slow range (its veto)")
            if ps.shape != (N_FEATURES,) or not (
                np.isfinite(ps).all() and ps.min() >= PERSIST_FLOOR
            ):
                raise ConfigError(
                    f"{where}: the median's range needs {N_FEATURES} numbers >= {PERSIST_FLOOR}"
                )
        if self.lines is not None and self.persist_scale is None:
            raise ConfigError(f"{where}: the envelope's lines come with the median's range (/7)")
        if self.quick_scale is not None:
            qs = np.asarray(self.quick_scale)
            if self.lines is None or self.lines.hold <= 1:
                raise ConfigError(f"{where}: the quick range comes with held envelope lines (/9)")
            if qs.shape != (N_FEATURES,) or not (
                np.isfinite(qs).all() and qs.min() >= PERSIST_FLOOR
            ):
                raise ConfigError(
                    f"{where}: the quick range needs {N_FEATURES} numbers >= {PERSIST_FLOOR}"
                )

    @property
    def deaf_line(self) -> float | None:
        """The 99th percentile of the general detector's logit on the recording (None: not
        measured): over the rule's threshold, the detector is out of its domain here."""
        p99 = self.detector_logit.get("p99") if self.detector_logit else None
        return float(p99) if p99 is not None else None

    @property
    def rhythm_max(self) -> float | None:
        """The highest rhythm statistic of the healthy recording (None: not measured)."""
        top = self.rhythm.get("max") if self.rhythm else None
        return float(top) if top is not None else None

    @property
    def logit_max(self) -> float | None:
        """The general detector's highest logit on the recording (None: not measured)."""
        top = self.detector_logit.get("max") if self.detector_logit else None
        return float(top) if top is not None else None

    @property
    def calibration(self) -> tuple[float, float] | None:
        """``(q, median)``: the 99.9th percentile and the median of the general detector's
        logit on the recording (None: not measured, files of format /1 and /2)."""
        if not self.detector_logit:
            return None
        return float(self.detector_logit["p999"]), float(self.detector_logit["p50"])

    @property
    def detector_sha256(self) -> str | None:
        det = self.provenance.get("detector")
        return det.get("sha256") if isinstance(det, Mapping) else None

    @property
    def id(self) -> str:
        """A short digest of the numbers (two enrolments with the same id decide alike)."""
        h = hashlib.sha256(self.mean.tobytes() + self.sd.tobytes())
        h.update(f"{self.novelty_scale!r},{self.shift!r}".encode())
        if self.rhythm_max is not None:  # files of format /1 keep their id
            h.update(f",{self.rhythm_max!r}".encode())
        if self.logit_max is not None:  # files of format /2 keep their id
            h.update(f";{self.logit_max!r}".encode())
        if self.station_model is not None:  # files of format /3 keep their id
            h.update(self.station_model.digest.encode())
        if self.slow_scale is not None:  # files of format /3 and /4 keep their id
            h.update(np.asarray(self.slow_scale, "<f4").tobytes() + f"{self.slow_alpha!r}".encode())
        if self.persist_scale is not None:  # files of format /5 keep their id
            h.update(
                np.asarray(self.persist_scale, "<f4").tobytes() + f"/{PERSIST_WINDOWS}".encode()
            )
        if self.lines is not None:  # files of format /6 keep their id
            h.update(np.asarray(self.lines.reference, "<f4").tobytes())
            h.update(f"|{self.lines.top!r}".encode())
            if self.lines.orders is not None:  # files of format /9 keep their id
                h.update(json.dumps(self.lines.orders.record(), sort_keys=True).encode())
        if self.quick_scale is not None:  # files of format /11 and older keep their id
            h.update(np.asarray(self.quick_scale, "<f4").tobytes() + f"/{QUICK_WINDOWS}".encode())
        return h.hexdigest()[:12]

    def summary(self) -> dict[str, Any]:
        """What ``scan`` and ``run`` report of the enrolment a station runs with."""
        out = {
            "id": self.id,
            "created": self.created,
            "seconds": self.provenance.get("seconds"),
            "sources": [s.get("name") for s in self.provenance.get("sources", ())],
            "rhythm_max": self.rhythm_max,
            "detector_logit_max": self.logit_max,
        }
        if self.station_model is not None:  # format /4 only: the others report as before
            out["station_model"] = True
        if self.slow_scale is not None:  # formats /5 and /6 only
            out["slow_range"] = True
        if self.persist_scale is not None:  # formats /6 to /9
            out["median_range"] = True
        if self.lines is not None:  # formats /7 to /9
            out["envelope_lines"] = True
            out["envelope_lines_mean"] = self.lines.mean_reference is not None
            out["envelope_lines_hold"] = self.lines.hold
            if self.lines.orders is not None:  # formats /10 and /11
                out["bearing_orders"] = self.lines.orders.bearing.record()
                out["strong_comb"] = self.lines.orders.single_top is not None
        if self.quick_scale is not None:  # format /12
            out["quick_range"] = True
        return out

    def to_json(self) -> str:
        """The file's text: format /3, /4 with a station model, /5 with the slow range, /6
        with the median's range too, /7 with the envelope's lines too, /8 with their mean, /9
        with their tops for a comb held at one rate (what ``enroll`` writes), /10 with a
        bearing's orders, /11 with the strong comb's tops at them, /12 any of /9 to /11 with
        the quick median's range (what ``enroll`` writes from Session 38 on)."""
        fmt = FORMAT if self.station_model is None else FORMAT_MODEL
        if self.slow_scale is not None:
            fmt = FORMAT_SLOW if self.persist_scale is None else FORMAT_STEADY
        if self.lines is not None:
            fmt = FORMAT_LINES if self.lines.mean_reference is None else FORMAT_MEAN
            if self.lines.hold > 1:
                fmt = FORMAT_HELD if self.lines.orders is None else FORMAT_ORDERS
            if self.lines.orders is not None and self.lines.orders.single_top is not None:
                fmt = FORMAT_STRONG
        if self.quick_scale is not None:
            fmt = FORMAT_QUICK
        doc: dict[str, Any] = {
            "format": fmt,
            "station": self.station,
            "created": self.created,
            "provenance": dict(self.provenance),
            "general_detector": dict(self.general),
            "model": {
                "shift": self.shift,
                "novelty_scale": self.novelty_scale,
                "mean": [float(x) for x in self.mean],
                "sd": [float(x) for x in self.sd],
                "rhythm": dict(self.rhythm),
                "detector_logit": dict(self.detector_logit),
            },
        }
        if self.station_model is not None:
            doc["model"]["station_model"] = self.station_model.record()
        if self.slow_scale is not None:
            doc["model"]["slow"] = {
                "alpha": self.slow_alpha,
                "scale": [float(x) for x in self.slow_scale],
            }
        if self.persist_scale is not None:
            doc["model"]["persist"] = {
                "windows": PERSIST_WINDOWS,
                "scale": [float(x) for x in self.persist_scale],
            }
        if self.lines is not None:
            doc["model"]["lines"] = self.lines.record()
        if self.quick_scale is not None:
            doc["model"]["quick"] = {
                "windows": QUICK_WINDOWS,
                "scale": [float(x) for x in self.quick_scale],
            }
        return json.dumps(doc, ensure_ascii=False, indent=1) + "\n"

    @classmethod
    def from_json(cls, text: str, where: str = "enrolment") -> Enrolment:
        """Parse a file's text; :class:`ConfigError` on anything not an enrolment."""
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{where}: not JSON ({e})") from None
        if not isinstance(doc, dict) or doc.get("format") not in FORMATS:
            found = doc.get("format") if isinstance(doc, dict) else None
            raise ConfigError(
                f"{where}: not an enrolment of format {' or '.join(FORMATS)} (found {found!r}); "
                "enrol the station again with this version"
            )
        model = doc.get("model")
        station = doc.get("station")
        if not isinstance(model, dict) or not isinstance(station, str):
            raise ConfigError(f"{where}: no station or model")
        own = None
        if doc["format"] == FORMAT_MODEL and "station_model" not in model:
            raise ConfigError(f"{where}: a file of format {FORMAT_MODEL} needs a station_model")
        fmt = doc["format"]
        if fmt in (FORMAT_MODEL, *_SLOWED) and "station_model" in model:
            own = StationModel.from_record(model["station_model"], where)  # older: none
        slow_scale, slow_alpha = None, SLOW_ALPHA
        if fmt in _SLOWED:  # older: no slow range
            slow = model.get("slow")
            if not isinstance(slow, dict):
                raise ConfigError(f"{where}: a file of format {FORMAT_SLOW} needs a slow range")
            slow_scale = _vector(slow, "scale", where)
            slow_alpha = slow.get("alpha", SLOW_ALPHA)
            if not isinstance(slow_alpha, int | float):
                raise ConfigError(f"{where}: the slow average's alpha must be a number")
        persist_scale = None
        if fmt in _STEADIED:  # older: no median's range
            persist_scale = _median_range(model, "persist", PERSIST_WINDOWS, fmt, where)
        lines = None
        if fmt in _LINED:  # older formats: no envelope lines, as before
            if "lines" not in model:
                raise ConfigError(f"{where}: a file of format {fmt} needs envelope lines")
            lines = LinesProfile.from_record(model["lines"], where)
            if (lines.hold > 1) != (fmt in _HELD):
                raise ConfigError(
                    f"{where}: envelope lines {'without' if fmt in _HELD else 'with'} "
                    f"tops for a held comb in a file of format {fmt}"
                )
            ordered = fmt in (FORMAT_ORDERS, FORMAT_STRONG)
            if (lines.orders is not None) != ordered and fmt != FORMAT_QUICK:
                raise ConfigError(
                    f"{where}: envelope lines {'without' if ordered else 'with'} "
                    f"a bearing's orders in a file of format {fmt}"
                )
            single = lines.orders is not None and lines.orders.single_top is not None
            if single != (fmt == FORMAT_STRONG) and fmt != FORMAT_QUICK:
                raise ConfigError(
                    f"{where}: a bearing's orders {'without' if not single else 'with'} "
                    f"the strong comb's tops in a file of format {fmt}"
                )
            if lines.hold == 1 and (lines.mean_reference is None) != (fmt == FORMAT_LINES):
                raise ConfigError(
                    f"{where}: envelope lines {'with' if fmt == FORMAT_LINES else 'without'} "
                    f"a mean in a file of format {fmt}"
                )
        quick_scale = None
        if fmt == FORMAT_QUICK:  # older: no quick range
            quick_scale = _median_range(model, "quick", QUICK_WINDOWS, fmt, where)
        try:
            return cls(
                station,
                _vector(model, "mean", where),
                _vector(model, "sd", where),
                float(model["novelty_scale"]),
                float(model["shift"]),
                dict(doc.get("provenance") or {}),
                dict(doc.get("general_detector") or {}),
                str(doc.get("created", "")),
                {str(k): float(v) for k, v in (model.get("rhythm") or {}).items()},
                {str(k): float(v) for k, v in (model.get("detector_logit") or {}).items()},
                own,
                slow_scale,
                float(slow_alpha),
                persist_scale,
                lines,
                quick_scale,
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, ConfigError):
                raise
            raise ConfigError(f"{where}: bad model ({e})") from None


class EnrolmentStore:
    """A directory of enrolments, one ``<station>.json`` each (the name %-encoded when it
    holds anything but letters, digits, ``.``, ``_`` or ``-``)."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_enrolment_dir()

    def path(self, station: str) -> Path:
        if not station or len(station) > 200:
            raise InvalidRequest(f"station name must be 1-200 characters, got {station!r}")
        name = quote(station, safe="")
        if name.startswith("."):  # no hidden files, no '..'
            name = "%2E" + name[1:]
        return self.root / f"{name}.json"

    def load(self, station: str) -> Enrolment | None:
        """The station's enrolment, None when it has none; :class:`ConfigError` when its
        file cannot be read or is not one, or belongs to another station."""
        p = self.path(station)
        try:
            text = p.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as err:
            raise ConfigError(f"cannot read enrolment {p}: {err}") from err
        found = Enrolment.from_json(text, str(p))
        if found.station != station:
            raise ConfigError(f"{p} is the enrolment of {found.station!r}, not {station!r}")
        return found

    def save(self, enrolment: Enrolment) -> Path:
        """Write (replace) the station's file atomically; returns its path."""
        p = self.path(enrolment.station)
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            tmp = p.with_name(p.name + ".tmp")
            tmp.write_text(enrolment.to_json(), encoding="utf-8")
            tmp.replace(p)
        except OSError as e:
            raise InvalidRequest(f"cannot write enrolment {p}: {e.strerror or e}") from e
        return p


def _hearing_margins(
    values: Sequence[float] | None,
    has: npt.NDArray[np.bool_],
    deaf: npt.NDArray[np.bool_],
    what: str,
) -> F32:
    """A rule's margin per station (``values``, one each; None: 0, off) where the station
    ``has`` the clause (0 elsewhere), ``LINES_HEARING`` times it where its detector hears
    (not ``deaf``)."""
    n = len(has)
    v = np.zeros(n, np.float32) if values is None else np.asarray(values, np.float32)
    if v.shape != (n,):
        raise InvalidRequest(f"{len(v)} {what} for {n} stations")
    out: F32 = np.where(has, np.where(deaf, v, v * np.float32(LINES_HEARING)), 0.0).astype(
        np.float32
    )
    return out


class Baselines:
    """The enrolments of ``len(enrolments)`` stations (None: that station has none), applied
    to each tick's scores in one batch. A plain synchronous class with state per station
    (the novelty's average and the detector's slow average), like the detector.

    ``thresholds``: per station, the rule's threshold (default ``Rule().threshold``), for the
    calibration (module doc).
    ``novelty``: per station, the rule's novelty clause (``Rule.novelty``, 0: off); after
    each :meth:`adjust`, ``last_novel`` says which stations' windows were novelty hits.
    ``rhythm``: per station, the rule's rhythm margin (``Rule.rhythm``, 0: off); a station
    with the clause and an enrolment that measured its rhythm has ``rhythm_threshold``
    (infinity for the others); :meth:`rhythmic` says which windows reach it.
    ``slow``: per station, the rule's slow bar (``Rule.slow``, 0: off); a station with it and
    an enrolment of format /5 counts a window as a hit (``last_novel``) when its slow
    statistic (``last_slow``: the highest over the ``SLOW_HIGH`` bands of the slow average
    of ``z`` over the recording's highest) reaches the bar while no ``SLOW_LOW`` band's is
    ``SLOW_VETO`` times over its own (something else is going on: a vehicle passing, a
    change of speed).
    ``persist``: per station, the rule's persist bar (``Rule.persist``, 0: off); a station with
    it and an enrolment of format /6 counts a window as a hit (``last_novel``) when its
    steady statistic (``last_persist``: the second-highest over the ``SLOW_HIGH`` bands of
    the median of ``z`` over the last ``PERSIST_WINDOWS`` windows, over the recording's highest)
    reaches the bar while the low bands' slow average has been under ``SLOW_VETO`` times their
    own range for the last ``PERSIST_HOLD`` windows and the ``PERSIST_MID`` bands' median is
    under ``PERSIST_MID_VETO`` times theirs (``steady.Steady``).
    ``quick``: per station, the rule's quick bar (``Rule.quick``, 0: off); the same with the
    median over the last ``QUICK_WINDOWS`` windows, its own scale (format /12,
    ``Enrolment.quick_scale``) and ``QUICK_HOLD``. ``quick_db``: per station, the rule's
    quick bar in decibels (``Rule.quick_db``, 0: off): the same median and scale, in decibels
    over the band's own highest (``QUICK_DB_LOW_VETO``, no mid veto).
    """

    def __init__(
        self,
        enrolments: Sequence[Enrolment | None],
        novelty: Sequence[float] | None = None,
        rhythm: Sequence[float] | None = None,
        thresholds: Sequence[float] | None = None,
        slow: Sequence[float] | None = None,
        persist: Sequence[float] | None = None,
        lines: Sequence[float] | None = None,
        orders: Sequence[float] | None = None,
        strong: Sequence[float] | None = None,
        quick: Sequence[float] | None = None,
        quick_db: Sequence[float] | None = None,
    ) -> None:
        n = len(enrolments)
        self.enrolments = list(enrolments)
        self.enrolled = np.array([e is not None for e in enrolments], dtype=bool)
        self.any = bool(self.enrolled.any())
        nov = np.zeros(n, np.float32) if novelty is None else np.asarray(novelty, np.float32)
        if nov.shape != (n,):
            raise InvalidRequest(f"{len(nov)} novelty thresholds for {n} stations")
        self._novelty = np.where(self.enrolled & (nov > 0), nov, np.inf).astype(np.float32)
        self.novelty_clause = bool(np.isfinite(self._novelty).any())
        margin = np.zeros(n, np.float32) if rhythm is None else np.asarray(rhythm, np.float32)
        if margin.shape != (n,):
            raise InvalidRequest(f"{len(margin)} rhythm margins for {n} stations")
        thr = np.full(n, 0.92) if thresholds is None else np.asarray(thresholds, np.float64)
        if thr.shape != (n,) or not np.all((thr > 0) & (thr <= 1)):
            raise InvalidRequest(f"need {n} thresholds in (0, 1]")
        tops = [e.rhythm_max if e is not None else None for e in enrolments]
        self.rhythm_threshold = np.array(
            [
                max(top + m, RHYTHM_FLOOR) if top is not None and m > 0 else np.inf
                for top, m in zip(tops, margin.tolist(), strict=True)
            ],
            np.float32,
        )
        self.rhythm_clause = bool(np.isfinite(self.rhythm_threshold).any())
        self.last_novel = np.zeros(n, dtype=bool)
        self._mean = np.zeros((n, N_FEATURES), np.float32)
        self._inv_sd = np.zeros((n, N_FEATURES), np.float32)
        self._gate_a = np.zeros(n, np.float32)  # g = clip(m_max * a - b, 0, 1)
        self._gate_b = np.zeros(n, np.float32)
        self._shift = np.zeros(n, np.float32)
        self._span = np.zeros(n, np.float32)  # BOOST + shift: delta = span * g - shift
        # the calibration c; a deaf station: its detector over its threshold on more than
        # 1 % of its healthy windows (the detector is out of its domain there)
        self._t = np.log(thr / np.maximum(1.0 - thr, 1e-12)).astype(np.float32)
        self._cal = np.zeros(n, np.float32)
        self.deaf = np.zeros(n, dtype=bool)
        width = GATE_HIGH - GATE_LOW
        for i, e in enumerate(enrolments):
            if e is None:
                self._gate_b[i] = 1.0  # m = 0 always: g = 0, delta = 0
                continue
            self._mean[i] = e.mean
            self._inv_sd[i] = 1.0 / e.sd
            self._gate_a[i] = 1.0 / (e.novelty_scale * width)
            self._gate_b[i] = GATE_LOW / width
            self._shift[i] = e.shift
            self._span[i] = BOOST + e.shift
            if e.calibration is not None:
                q, _median = e.calibration
                self._cal[i] = max(0.0, min(q, LOGIT_BOUND) - float(self._t[i]))
            line = e.deaf_line
            self.deaf[i] = line is not None and line > float(self._t[i])
        self.any_deaf = bool(self.deaf.any())
        # the stations' own models (format /4): logit = [clip(z), clip(m)] . w + bias
        own = [e.station_model if e is not None else None for e in enrolments]
        self.own_model = any(o is not None for o in own)
        self._own_wz = np.zeros((n, N_FEATURES), np.float32)
        self._own_wm = np.zeros((n, N_FEATURES), np.float32)
        self._own_b = np.full(n, -np.inf, np.float32)  # no model: -inf, never a hit
        self.own_threshold = np.full(n, np.inf, np.float32)
        for i, o in enumerate(own):
            if o is not None:
                self._own_wz[i], self._own_wm[i] = o.weights[:N_FEATURES], o.weights[N_FEATURES:]
                self._own_b[i], self.own_threshold[i] = o.bias, o.threshold
        self.last_own = np.full(n, -np.inf, np.float32)  # the own model's logit, last window
        bars = np.zeros(n, np.float32) if slow is None else np.asarray(slow, np.float32)
        if bars.shape != (n,):
            raise InvalidRequest(f"{len(bars)} slow bars for {n} stations")
        self._slow_a = np.zeros((n, 1), np.float32)
        self._slow_inv = np.zeros((n, N_FEATURES), np.float32)
        self.slow_threshold = np.full(n, np.inf, np.float32)
        for i, e in enumerate(enrolments):
            if e is not None and e.slow_scale is not None and bars[i] > 0:
                self._slow_a[i] = e.slow_alpha
                self._slow_inv[i] = 1.0 / e.slow_scale
                self.slow_threshold[i] = bars[i]
        self.slow_clause = bool(np.isfinite(self.slow_threshold).any())
        self.last_slow = np.zeros(n, np.float32)  # the slow statistic of the last window
        # the steady rises (steady.py): the persist clause (format /6) over PERSIST_WINDOWS
        # windows and the quick clause (format /12) over QUICK_WINDOWS; each its own scale
        persist_sc = _scaled(enrolments, persist, "persist", lambda e: e.persist_scale)
        self._persist = _steady(persist_sc, PERSIST_WINDOWS, PERSIST_HOLD)
        quick_sc = _scaled(enrolments, quick, "quick", lambda e: e.quick_scale)
        self._quick = _steady(quick_sc, QUICK_WINDOWS, QUICK_HOLD, QUICK_WARMUP, QUICK_LOW_VETO)
        # the quick clause in decibels reads the quick clause's ring (its medians and hold)
        db = _scaled(enrolments, quick_db, "quick_db", lambda e: e.quick_scale, decibels=True)
        self._quick_db = self._quick.read_also(
            db.threshold,
            db.high_inv,
            db.mid_inv,
            math.inf,
            db.low_inv,
            QUICK_DB_LOW_VETO,
            db.high_bias,
            db.low_bias,
        )
        steady_bars = (self._persist.threshold, self._quick.threshold, self._quick_db.threshold)
        for i, e in enumerate(enrolments):  # the low bands' veto needs their slow range
            if any(np.isfinite(b[i]) for b in steady_bars):
                assert e is not None and e.slow_scale is not None  # Enrolment checks it
                self._slow_a[i] = e.slow_alpha
                self._slow_inv[i] = 1.0 / e.slow_scale
        self.persist_clause = self._persist.clause
        self.quick_clause = self._quick.readings[0].clause
        self.quick_db_clause = self._quick_db.clause
        self._steadies = [s for s in (self._persist, self._quick) if s.clause]
        self._rows = np.arange(n)
        self._ema = self.slow_clause or bool(self._steadies)  # the slow average (and veto)
        self._ms = np.zeros((n, N_FEATURES), np.float32)
        self._ts = np.zeros((n, N_FEATURES), np.float32)
        self._slow_low = np.zeros(n, np.float32)
        # the envelope's lines (formats /7 to /9; lines.py): evaluated outside, by a ``Lines``
        # where the detector hears (not deaf) it stops what it hears, and the lines need
        # LINES_HEARING times the margin (on the project's own motors the lines at the
        # margin alone stopped a healthy one: docs/guard.md, Session 24)
        has = np.array([e is not None and e.lines is not None for e in enrolments], dtype=bool)
        self.lines_margin = _hearing_margins(lines, has, self.deaf, "lines margins")
        # the comb at a station's known bearing orders (format /10; orders.py): its own margin
        known = np.array(
            [e is not None and e.lines is not None and e.lines.orders is not None
             for e in enrolments], dtype=bool,
        )  # fmt: skip
        # as the every-rate lines': twice the margin where the detector hears, the mean only
        # where it is deaf (on the project's own motors, each enrolled on another recording,
        # a neighbour's line near an order stopped healthy ones: docs/guard.md, Session 35)
        self.orders_margin = _hearing_margins(orders, known, self.deaf, "known orders' margins")
        # where the orders watch, the comb at every rate is a backstop (a wrong bearing
        # given): BACKSTOP times its margin
        backstop = np.where(self.orders_margin > 0, np.float32(BACKSTOP), np.float32(1.0))
        self.lines_margin = (self.lines_margin * backstop).astype(np.float32)
        # the strong comb at the known orders (format /11; orders.py): one evaluation's comb,
        # not held, over the highest one evaluation of the healthy recording reached; where
        # the orders watch, twice the margin where the detector hears, as theirs
        single = np.array(
            [e is not None and e.lines is not None and e.lines.orders is not None
             and e.lines.orders.single_top is not None for e in enrolments], dtype=bool,
        )  # fmt: skip
        watched = single & (self.orders_margin > 0)
        self.strong_margin = _hearing_margins(strong, watched, self.deaf, "strong combs' margins")
        self.lines_clause = bool((self.lines_margin > 0).any() or (self.orders_margin > 0).any())
        # the stations' envelope lines, stepped after each tick (``step_lines``); their mean
        # over 5.12 s only where the detector is deaf: it also hears a lasting difference
        # between two healthy recordings of a motor, and where the detector hears, it stops
        # what the mean would add (docs/guard.md, Session 25)
        self.lines = (
            Lines(
                [e.lines if e is not None else None for e in enrolments],
                self.lines_margin,
                means=self.deaf,
                orders_margins=self.orders_margin,
                strong_margins=self.strong_margin,
            )
            if self.lines_clause
            else None
        )
        self.novelty_clause = (
            self.novelty_clause
            or self.own_model
            or self.slow_clause
            or bool(self._steadies)
            or self.lines_clause
        )
        self._m = np.zeros((n, N_FEATURES), np.float32)
        self._z = np.zeros((n, N_FEATURES), np.float32)
        self._g = np.zeros(n, np.float32)
        self.last_novelty = np.zeros(n, np.float32)  # r of the last window, per station

    @property
    def persist_threshold(self) -> F32:
        """Per station, the persist clause's bar (infinity: off)."""
        return self._persist.threshold

    @property
    def last_persist(self) -> F32:
        """Per station, the persist clause's statistic of the last window."""
        return self._persist.last

    @property
    def last_quick(self) -> F32:
        """Per station, the quick clause's statistic of the last window."""
        return self._quick.last

    @property
    def quick_threshold(self) -> F32:
        """Per station, the quick clause's bar (infinity: off)."""
        return self._quick.threshold

    @property
    def last_quick_db(self) -> F32:
        """Per station, the quick clause's statistic in decibels of the last window."""
        return self._quick_db.last

    @property
    def quick_db_threshold(self) -> F32:
        """Per station, the quick clause's bar in decibels (infinity: off)."""
        return self._quick_db.threshold

    def rhythmic(self, rhythm: F32, rows: npt.ArrayLike | None = None) -> npt.NDArray[np.bool_]:
        """Which of the stations in ``rows`` (default all) reach their rhythm threshold with
        the statistics ``rhythm`` (``rhythm.Rhythm.step``)."""
        thr = self.rhythm_threshold
        if rows is not None:
            thr = thr[np.asarray(rows, np.int64)]
        out: npt.NDArray[np.bool_] = np.asarray(rhythm) >= thr
        return out

    def step_lines(
        self,
        envelope: npt.ArrayLike,
        rows: npt.ArrayLike | None = None,
        audio: npt.ArrayLike | None = None,
        deadline: float | None = None,
    ) -> npt.NDArray[np.bool_]:
        """Add the newest window's band envelopes of the stations in ``rows`` (default all)
        to their envelope lines (``lines.Lines.step``, after the tick's stops are published;
        ``audio``: the windows, for the stations with known bearing orders; ``deadline``: on
        ``time.perf_counter``, when the tick's share for them ends, ``tickshare.py``);
        returns which of them are hits for their next window."""
        if self.lines is None:
            n = self.lines_margin.shape[0] if rows is None else len(np.asarray(rows))
            return np.zeros(n, dtype=bool)
        return self.lines.step(envelope, rows, audio, deadline)

    def reset(self, stream: int | None = None) -> None:
        """Forget the averages of one station (or all): a new recording."""
        sel = slice(None) if stream is None else stream
        self._m[sel] = 0.0
        self._ms[sel] = 0.0
        self._persist.reset(stream)
        self._quick.reset(stream)
        if self.lines is not None:
            self.lines.reset(stream)

    def adjust(
        self,
        features: F32,
        scores: F32,
        rows: npt.ArrayLike | None = None,
        logits: F32 | None = None,
    ) -> F32:
        """The scores the rules see: ``scores`` of the stations in ``rows`` (default all, in
        order) moved by each enrolled station's baseline; unenrolled ones unchanged.
        ``logits``: the detector's logits of ``scores`` (``Detector.last_logit``; None:
        taken from ``scores``, which saturate at about +-16.6)."""
        if not self.any:
            return scores
        if logits is None:
            logits = logit_of(scores)
        if rows is None:
            return self._adjust_all(features, scores, logits)
        idx = np.asarray(rows, np.int64)
        m = self._m[idx]
        z = (features - self._mean[idx]) * self._inv_sd[idx]
        m += np.float32(ALPHA) * (z - m)
        self._m[idx] = m
        peak = m.max(axis=1)
        r = peak * self._gate_a[idx] * np.float32(GATE_HIGH - GATE_LOW)
        self.last_novelty[idx] = r
        self.last_novel[idx] = r >= self._novelty[idx]
        if self.own_model:
            own = _rowdot(np.clip(z, -Z_CLIP, Z_CLIP), self._own_wz[idx])
            own += _rowdot(np.clip(m, -Z_CLIP, Z_CLIP), self._own_wm[idx])
            own += self._own_b[idx]
            self.last_own[idx] = own
            self.last_novel[idx] |= own >= self.own_threshold[idx]
        if self._ema:
            ms = self._ms[idx]
            ms += self._slow_a[idx] * (z - ms)
            self._ms[idx] = ms
            ts = ms * self._slow_inv[idx]
            u = ts[:, SLOW_HIGH].max(axis=1)
            self.last_slow[idx] = u
            calm = ts[:, SLOW_LOW].max(axis=1) < np.float32(SLOW_VETO)
            self.last_novel[idx] |= (u >= self.slow_threshold[idx]) & calm
            for steady in self._steadies:
                steady.push(z[:, SLOW_HIGH], z[:, PERSIST_MID], z[:, SLOW_LOW], idx)
                self.last_novel[idx] |= steady.hits(calm, idx)
        g = np.clip(peak * self._gate_a[idx] - self._gate_b[idx], 0.0, 1.0)
        out = logits - self._cal[idx] + self._span[idx] * g - self._shift[idx]
        if self.any_deaf:
            self._own_evidence(out, idx)
        return _sigmoid(scores, out, self.enrolled[idx])

    def _adjust_all(self, features: F32, scores: F32, logits: F32) -> F32:
        z, m, g = self._z, self._m, self._g
        np.subtract(features, self._mean, out=z)
        z *= self._inv_sd
        own = _rowdot(np.clip(z, -Z_CLIP, Z_CLIP), self._own_wz) if self.own_model else None
        for steady in self._steadies:  # the rings of the high bands' z (before z is reused)
            steady.push(z[:, SLOW_HIGH], z[:, PERSIST_MID], z[:, SLOW_LOW])
        if self._ema:  # ms += a (z - ms); u = max(ms / scale) over the high bands
            ts = self._ts
            np.subtract(z, self._ms, out=ts)
            ts *= self._slow_a
            self._ms += ts
            np.multiply(self._ms, self._slow_inv, out=ts)
            np.max(ts[:, SLOW_HIGH], axis=1, out=self.last_slow)
            np.max(ts[:, SLOW_LOW], axis=1, out=self._slow_low)
        z -= m
        z *= np.float32(ALPHA)
        m += z
        np.max(m, axis=1, out=g)
        g *= self._gate_a
        np.multiply(g, np.float32(GATE_HIGH - GATE_LOW), out=self.last_novelty)
        if self.novelty_clause:
            np.greater_equal(self.last_novelty, self._novelty, out=self.last_novel)
        if own is not None:
            own += _rowdot(np.clip(m, -Z_CLIP, Z_CLIP), self._own_wm)
            own += self._own_b
            self.last_own[:] = own
            self.last_novel |= own >= self.own_threshold
        if self.slow_clause:
            self.last_novel |= (self.last_slow >= self.slow_threshold) & (
                self._slow_low < np.float32(SLOW_VETO)
            )
        if self._steadies:  # the median of each high band over its ring
            calm = self._slow_low < np.float32(SLOW_VETO)
            for steady in self._steadies:
                self.last_novel |= steady.hits(calm)
        g -= self._gate_b
        np.clip(g, 0.0, 1.0, out=g)
        g *= self._span
        g -= self._shift
        g += logits
        g -= self._cal
        if self.any_deaf:
            self._own_evidence(g, self._rows)
        return _sigmoid(scores, g, self.enrolled)

    def _own_evidence(self, out: F32, idx: npt.NDArray[np.int64]) -> None:
        """On a deaf station, the logit the rules see is its own evidence instead of the
        detector's: ``EVIDENCE_SLOPE`` per unit over the bars of its persist clause (its
        statistic over the bar, less 1) and of its envelope lines (over the bar, in units of
        the margin), kept ``DEAF_GAP`` under the threshold: it ranks the station's windows
        (the reports' AUC) and never makes a hit; the hits are the clauses' own."""
        deaf = self.deaf[idx]
        if not deaf.any():
            return
        rows = idx[deaf]
        with np.errstate(divide="ignore", invalid="ignore"):
            persist = np.where(
                np.isfinite(self._persist.threshold[rows]),
                self._persist.last[rows] / self._persist.threshold[rows] - 1.0,
                -np.inf,
            )
            if self.lines is None:  # no station has the clause: no evidence from it
                lines = np.full(len(rows), -np.inf)
            else:
                # in units of the orders' margin where they watch (the clause that decides
                # there), else of the every-rate lines'
                unit = np.where(
                    self.orders_margin[rows] > 0,
                    self.orders_margin[rows],
                    self.lines_margin[rows],
                )
                lines = np.where(unit > 0, self.lines.last[rows] / np.maximum(unit, 1e-6), -np.inf)
        ev = np.maximum(persist, lines).astype(np.float32)
        t = self._t[rows]
        logit = np.clip(t + np.float32(EVIDENCE_SLOPE) * ev, -LOGIT_BOUND, t - DEAF_GAP)
        out[deaf] = np.where(np.isfinite(logit), logit, -LOGIT_BOUND)


class _Scaled(NamedTuple):
    """A steady rise's reading per station (``steady.Reading``'s arrays)."""

    threshold: F32
    high_inv: F32
    mid_inv: F32
    low_inv: F32
    high_bias: F32 | None
    low_bias: F32 | None


def _scaled(
    enrolments: Sequence[Enrolment | None],
    bars: Sequence[float] | None,
    what: str,
    scale_of: Callable[[Enrolment], F32 | None],
    decibels: bool = False,
) -> _Scaled:
    """The bars and gains of a steady rise for the stations whose enrolment has its scale
    (``scale_of``) and whose bar is over 0: one over the scale of each band, or with
    ``decibels`` the band's spread in decibels and a bias of its scale times it (the median
    in decibels over its own highest; no mid bands)."""
    n = len(enrolments)
    pb = np.zeros(n, np.float32) if bars is None else np.asarray(bars, np.float32)
    if pb.shape != (n,):
        raise InvalidRequest(f"{len(pb)} {what} bars for {n} stations")
    high, mid = len(range(N_FEATURES)[SLOW_HIGH]), len(range(N_FEATURES)[PERSIST_MID])
    high_inv = np.zeros((n, high), np.float32)
    mid_inv = np.zeros((n, mid), np.float32)
    low_inv = np.zeros((n, len(range(N_FEATURES)[SLOW_LOW])), np.float32)
    threshold = np.full(n, np.inf, np.float32)
    high_bias, low_bias = np.zeros_like(high_inv), np.zeros_like(low_inv)
    for i, e in enumerate(enrolments):
        scale = scale_of(e) if e is not None else None
        if scale is None or pb[i] <= 0:
            continue
        threshold[i] = pb[i]
        assert e is not None  # a scale comes from an enrolment
        if decibels:  # (median z - scale) * sd in dB: the median over its own highest
            high_inv[i], low_inv[i] = DB * e.sd[SLOW_HIGH], DB * e.sd[SLOW_LOW]
            high_bias[i] = scale[SLOW_HIGH] * high_inv[i]
            low_bias[i] = scale[SLOW_LOW] * low_inv[i]
        else:
            high_inv[i] = 1.0 / scale[SLOW_HIGH]
            mid_inv[i] = 1.0 / scale[PERSIST_MID]
            low_inv[i] = 1.0 / scale[SLOW_LOW]
    if decibels:
        return _Scaled(threshold, high_inv, mid_inv, low_inv, high_bias, low_bias)
    return _Scaled(threshold, high_inv, mid_inv, low_inv, None, None)


def _steady(
    sc: _Scaled, windows: int, hold: int, warmup: int = 0, low_veto: float | None = None
) -> Steady:
    """A steady rise (``steady.py``) over ``windows`` with ``sc`` as its first reading and
    the mid bands' veto; ``low_veto``: the low bands' median over the same ring vetoes at
    this many times its scale (None: no such veto, and no ring of the low bands)."""
    th, hi, mid = sc.threshold, sc.high_inv, sc.mid_inv
    if low_veto is None:
        return Steady(windows, hold, PERSIST_MID_VETO, th, hi, mid, warmup)
    return Steady(windows, hold, PERSIST_MID_VETO, th, hi, mid, warmup, sc.low_inv, low_veto)


def _rowdot(a: F32, b: F32) -> F32:
    """Per row, ``a . b`` (no BLAS: see ``features.py``)."""
    out: F32 = np.einsum("ij,ij->i", a, b)
    return out


def _sigmoid(p: F32, logit: F32, enrolled: npt.NDArray[np.bool_]) -> F32:
    """``sigmoid(logit)`` where ``enrolled``, ``p`` itself elsewhere (a new array)."""
    out = np.clip(logit, -60.0, 60.0)  # no overflow in exp
    np.negative(out, out=out)
    np.exp(out, out=out)
    out += np.float32(1.0)
    np.reciprocal(out, out=out)
    np.copyto(out, np.asarray(p, np.float32), where=~enrolled)
    return out
