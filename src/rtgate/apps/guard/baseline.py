"""A station's own normal (its enrolment) and how the stop path uses it, for many stations.

``guard enroll`` listens to a healthy station and keeps, per feature of the detector's input,
the mean and the spread, and how far a slow average of the features strayed from that mean
(``novelty_scale``). At run time, per window and station (:class:`Baselines`, vectorised
over stations, a few array operations per tick):

- ``z = (features - mean) / sd``; ``m += ALPHA * (z - m)`` (an average over ~5 windows);
- novelty ``r = max(m) / novelty_scale``: 1 is the most the healthy recording reached; one
  sided, since a defect adds energy and impulsiveness (less of it is no bearing fault);
- gate ``g = clip((r - GATE_LOW) / (GATE_HIGH - GATE_LOW), 0, 1)``;
- the general detector's score moves in logit by ``delta = BOOST * g - shift * (1 - g)``:
  on a window that sounds like the station's normal the detector must be surer, on one the
  station has never sounded like it may be a little less sure. The rules then apply as
  they are.

The rhythm (``rhythm.py``): the enrolment also keeps the station's healthy range of the
envelope's rhythm statistic (its highest value and quantiles over the recording). A station
whose rule has a rhythm clause (``Rule.rhythm``, a margin; off by default, ``RHYTHM_MARGIN``
is the one chosen on validation) counts a window whose statistic
reaches ``max(highest healthy + margin, RHYTHM_FLOOR)`` as a hit, whatever the detector's
score: a train of impacts the station never made while healthy, heard on machines the
detector is deaf to. The clause only adds hits, so a fault present while enrolling (its
rhythm then counted as normal) is still stopped by the general detector as below.

The bound: ``delta`` stays in ``[-SHIFT_MAX, BOOST]`` whatever a file says (a file outside
it is refused), so a score that would stop a station with ``k`` of ``n`` windows at
``sigmoid(logit(threshold) + SHIFT_MAX)`` (0.981 for the default 0.92) or at once at
``sigmoid(logit(instant) + SHIFT_MAX)`` (0.9989 for 0.995) still does, and a saturated
score (1.0) is never moved: an enrolment cannot silence a clear fault, even one that was
present in the recording it was made from.

Files (:class:`EnrolmentStore`): one JSON file per station in a directory: the numbers, the
provenance of the recording and the detector they belong to. The directory is
``--enrolments DIR``, else ``$RTGATE_GUARD_ENROLMENTS``, else
``$XDG_DATA_HOME/rtgate/enrolments`` (``~/.local/share/rtgate/enrolments``).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.features import N_FEATURES
from rtgate.apps.guard.paths import user_data_path
from rtgate.core.errors import ConfigError, InvalidRequest

__all__ = [
    "ALPHA",
    "BOOST",
    "FORMAT",
    "FORMATS",
    "GATE_HIGH",
    "GATE_LOW",
    "RHYTHM_FLOOR",
    "RHYTHM_MARGIN",
    "SHIFT_MAX",
    "Baselines",
    "Enrolment",
    "EnrolmentStore",
    "default_enrolment_dir",
    "detector_identity",
]

F32 = npt.NDArray[np.float32]
FORMAT = "rtgate-guard-enrolment/2"  # /2 added the rhythm's range
FORMATS = ("rtgate-guard-enrolment/1", FORMAT)  # /1 files load, without a rhythm range
ALPHA = 0.2  # the novelty's average: about 5 windows (0.1 s)
GATE_LOW, GATE_HIGH = 0.6, 1.0  # novelty at which the shift starts and stops giving way
SHIFT_MAX = 1.5  # logit: 0.92 -> 0.981, 0.995 -> 0.9989
BOOST = 1.0  # logit: on a novel window 0.92 -> 0.81
SD_FLOOR = 0.05  # a feature that barely moved while enrolling is not taken as exact
NOVELTY_FLOOR = 1.0  # in units of sd: a very steady recording does not make all novel
RHYTHM_FLOOR = 3.5  # the rhythm clause never fires under this, however quiet the recording
RHYTHM_MARGIN = 0.5  # the rules' rhythm margin chosen on validation (off by default)


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
    file of format /1: that station runs without the rhythm clause).
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

    @property
    def rhythm_max(self) -> float | None:
        """The highest rhythm statistic of the healthy recording (None: not measured)."""
        top = self.rhythm.get("max") if self.rhythm else None
        return float(top) if top is not None else None

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
        return h.hexdigest()[:12]

    def summary(self) -> dict[str, Any]:
        """What ``scan`` and ``run`` report of the enrolment a station runs with."""
        return {
            "id": self.id,
            "created": self.created,
            "seconds": self.provenance.get("seconds"),
            "sources": [s.get("name") for s in self.provenance.get("sources", ())],
            "rhythm_max": self.rhythm_max,
        }

    def to_json(self) -> str:
        doc = {
            "format": FORMAT,
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
            },
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


class Baselines:
    """The enrolments of ``len(enrolments)`` stations (None: that station has none), applied
    to each tick's scores in one batch. A plain synchronous class with state per station
    (the novelty's average), like the detector.

    ``novelty``: per station, the rule's novelty clause (``Rule.novelty``, 0: off); after
    each :meth:`adjust`, ``last_novel`` says which stations' windows were novelty hits.
    ``rhythm``: per station, the rule's rhythm margin (``Rule.rhythm``, 0: off); a station
    with the clause and an enrolment that measured its rhythm has ``rhythm_threshold``
    (infinity for the others); :meth:`rhythmic` says which windows reach it.
    """

    def __init__(
        self,
        enrolments: Sequence[Enrolment | None],
        novelty: Sequence[float] | None = None,
        rhythm: Sequence[float] | None = None,
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
        self._m = np.zeros((n, N_FEATURES), np.float32)
        self._z = np.zeros((n, N_FEATURES), np.float32)
        self._g = np.zeros(n, np.float32)
        self.last_novelty = np.zeros(n, np.float32)  # r of the last window, per station

    def rhythmic(self, rhythm: F32, rows: npt.ArrayLike | None = None) -> npt.NDArray[np.bool_]:
        """Which of the stations in ``rows`` (default all) reach their rhythm threshold with
        the statistics ``rhythm`` (``rhythm.Rhythm.step``)."""
        thr = self.rhythm_threshold
        if rows is not None:
            thr = thr[np.asarray(rows, np.int64)]
        out: npt.NDArray[np.bool_] = np.asarray(rhythm) >= thr
        return out

    def reset(self, stream: int | None = None) -> None:
        """Forget the novelty's average of one station (or all): a new recording."""
        self._m[slice(None) if stream is None else stream] = 0.0

    def adjust(self, features: F32, scores: F32, rows: npt.ArrayLike | None = None) -> F32:
        """The scores the rules see: ``scores`` of the stations in ``rows`` (default all, in
        order) moved by each enrolled station's baseline; unenrolled ones unchanged."""
        if not self.any:
            return scores
        if rows is None:
            return self._adjust_all(features, scores)
        idx = np.asarray(rows, np.int64)
        m = self._m[idx]
        z = (features - self._mean[idx]) * self._inv_sd[idx]
        m += np.float32(ALPHA) * (z - m)
        self._m[idx] = m
        peak = m.max(axis=1)
        r = peak * self._gate_a[idx] * np.float32(GATE_HIGH - GATE_LOW)
        self.last_novelty[idx] = r
        self.last_novel[idx] = r >= self._novelty[idx]
        g = np.clip(peak * self._gate_a[idx] - self._gate_b[idx], 0.0, 1.0)
        delta = self._span[idx] * g - self._shift[idx]
        return _moved(scores, delta, self.enrolled[idx])

    def _adjust_all(self, features: F32, scores: F32) -> F32:
        z, m, g = self._z, self._m, self._g
        np.subtract(features, self._mean, out=z)
        z *= self._inv_sd
        z -= m
        z *= np.float32(ALPHA)
        m += z
        np.max(m, axis=1, out=g)
        g *= self._gate_a
        np.multiply(g, np.float32(GATE_HIGH - GATE_LOW), out=self.last_novelty)
        if self.novelty_clause:
            np.greater_equal(self.last_novelty, self._novelty, out=self.last_novel)
        g -= self._gate_b
        np.clip(g, 0.0, 1.0, out=g)
        g *= self._span
        g -= self._shift
        return _moved(scores, g, self.enrolled)


def _moved(p: F32, delta: F32, enrolled: npt.NDArray[np.bool_]) -> F32:
    """``sigmoid(logit(p) + delta)`` as ``p / (p + (1 - p) exp(-delta))`` (positive for
    ``p`` in [0, 1]): no logit of 0 or 1, which stay put; ``p`` itself where not
    ``enrolled``."""
    p = np.asarray(p, dtype=np.float32)
    e = np.exp(-delta)
    e *= np.float32(1.0) - p
    e += p
    out = np.divide(p, e, out=e)
    np.copyto(out, p, where=~enrolled)
    return out
