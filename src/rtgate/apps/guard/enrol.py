"""``guard enroll``: listen to a healthy station and measure its own normal.

:func:`listen` runs the general detector over the recording (WAV files, stdin PCM or a sound
card chunks; at most ``max_seconds``) and keeps every window's features, score and rhythm
statistic (``rhythm.py``), one segment per source (the detector, the rhythm and the novelty
start afresh on each). :func:`fit` turns
that into an :class:`~rtgate.apps.guard.baseline.Enrolment` and checks it:

- too little audio (under :data:`MIN_SECONDS`) or a silent recording: refused;
- the general detector stops the station on the recording (the station's rule): refused
  unless ``accept_stops`` (someone has checked the machine by other means); a fault present
  from the first second looks like that, and a station enrolled on it would count the fault
  as its normal: accepted, the detector must be surer than on the recording (its
  calibration, ``baseline.py``), so only a rise above that, a rise over its own recent
  level, or a sound the station never made stops it;
- the enrolled station still stops on its own recording: said in the warnings.

The enrolment keeps the general detector's logit range on the recording (its score
calibration, ``detector_range``) and the rhythm's healthy range (its highest value and
quantiles, over the windows after each segment's first ``rhythm.WINDOWS``), for the rules'
rhythm clause.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.audio import WavStream
from rtgate.apps.guard.baseline import (
    LOGIT_BOUND,
    NOVELTY_FLOOR,
    PERSIST_FLOOR,
    PERSIST_WINDOWS,
    QUICK_WINDOWS,
    SD_FLOOR,
    SHIFT_MAX,
    SLOW_ALPHA,
    SLOW_FLOOR,
    Baselines,
    Enrolment,
    detector_identity,
)
from rtgate.apps.guard.detector import Detector, logit_of
from rtgate.apps.guard.features import (
    CREST_BANDS,
    HOP,
    N_FEATURES,
    N_SUB,
    RATE,
    Framer,
    WindowFeatures,
)
from rtgate.apps.guard.lines import lines_profile
from rtgate.apps.guard.orders import BearingOrders
from rtgate.apps.guard.rhythm import WINDOWS, Rhythm
from rtgate.apps.guard.rules import Rule, RuleEngine, Rules
from rtgate.apps.guard.station_model import fit_station_model
from rtgate.core.errors import InvalidRequest

__all__ = [
    "MIN_SECONDS",
    "NOVELTY_QUANTILE",
    "Fitted",
    "HashingReader",
    "Recording",
    "Source",
    "detector_range",
    "file_source",
    "fit",
    "listen",
    "persist_range",
    "rhythm_range",
    "slow_range",
    "steady_range",
]

F32 = npt.NDArray[np.float32]
MIN_SECONDS = 30.0
NOVELTY_QUANTILE = 0.999  # of the recording's novelty: the scale (1 = this much)
SILENT_RMS = 1e-5  # -100 dBFS: no microphone, or a muted one


@dataclass
class Source:
    """Where a segment of the recording came from (its provenance)."""

    name: str
    kind: str  # "file", "stdin" or "device"
    sample_rate: int
    channel: int = 0
    seconds: float = 0.0
    sha256: str | None = None  # of the file; of the PCM bytes read from stdin

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "sample_rate": self.sample_rate,
            "channel": self.channel,
            "seconds": round(self.seconds, 3),
            "sha256": self.sha256,
        }


def file_source(path: Path, channel: int = 0) -> tuple[Source, Iterator[F32]]:
    """A WAV file as a source: its sha256 now, its 16 kHz blocks when read. A file that
    cannot be read or is not a WAV is an :class:`InvalidRequest`."""
    wav = WavStream(path, channel=channel)
    digest = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as e:
        wav.close()
        raise InvalidRequest(f"cannot read {path}: {e.strerror or e}") from e
    src = Source(str(path), "file", wav.info.rate, channel, sha256=digest.hexdigest())
    return src, wav.blocks()


class HashingReader:
    """A binary stream that hashes what is read from it (stdin's provenance)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self.digest = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self._stream.read(n)
        self.digest.update(data)
        return data


@dataclass
class Recording:
    """Every window's features ``(T, N_FEATURES)`` and general score ``(T,)``; ``segments``
    are the windows of each source, ``[start, end)``; ``rhythm``: every window's rhythm
    statistic ``(T,)`` (None: not measured, the enrolment then has no rhythm range);
    ``logits``: the general detector's logit of every window (``Detector.last_logit``;
    None: taken from the scores, which saturate)."""

    features: F32
    scores: F32
    segments: list[tuple[int, int]]
    sources: list[Source]
    rms: float
    rhythm: F32 | None = None
    logits: F32 | None = None
    audio: F32 | None = None  # the 16 kHz audio of every window (a station model, orders)
    envelopes: F32 | None = None  # every window's band envelopes (T, bands, N_SUB): lines.py

    @property
    def seconds(self) -> float:
        return len(self.scores) * HOP / RATE


def listen(
    sources: Iterable[tuple[Source, Iterable[F32]]],
    detector: Detector,
    max_seconds: float,
    keep_audio: bool = False,
) -> Recording:
    """Run ``detector`` (one stream) over each source's 16 kHz chunks in turn, up to
    ``max_seconds`` of audio in all; the detector is reset between sources. ``keep_audio``:
    keep the windows' audio too (``Recording.audio``, for a station model)."""
    if detector.n_streams != 1:
        raise InvalidRequest("enrolment listens with a one-stream detector")
    wf = WindowFeatures()
    rhythm = Rhythm(1)
    limit = int(max_seconds * RATE) // HOP
    feats: list[F32] = []
    scores: list[float] = []
    rhythms: list[float] = []
    logits: list[float] = []
    kept: list[F32] = []
    envs: list[F32] = []
    segments, used, energy = [], [], 0.0
    for src, chunks in sources:
        if len(scores) >= limit:
            break
        detector.reset()
        rhythm.reset()
        start, framer = len(scores), Framer()
        for chunk in chunks:
            wins = [w for w, _ in framer.push(chunk, 0.0)][: limit - len(scores)]
            if not wins:
                continue
            x = np.stack(wins)
            if keep_audio:
                kept.append(x.reshape(-1))
            energy += float(np.square(x, dtype=np.float64).sum())
            env = np.zeros((len(x), len(CREST_BANDS), N_SUB), np.float32)
            f = wf(x, env)
            envs.append(env)
            for row, e in zip(f, env, strict=True):
                scores.append(float(detector.step(row[None])[0]))
                logits.append(float(detector.last_logit[0]))
                rhythms.append(float(rhythm.step(e[None])[0]))
            feats.append(f)
            if len(scores) >= limit:
                break
        src.seconds = (len(scores) - start) * HOP / RATE
        segments.append((start, len(scores)))
        used.append(src)
    n = len(scores)
    f_all = np.concatenate(feats) if feats else np.zeros((0, N_FEATURES), np.float32)
    rms = float(np.sqrt(energy / (n * HOP))) if n else 0.0
    return Recording(
        f_all,
        np.asarray(scores, np.float32),
        segments,
        used,
        rms,
        np.asarray(rhythms, np.float32),
        np.asarray(logits, np.float32),
        np.concatenate(kept) if kept else (np.zeros(0, np.float32) if keep_audio else None),
        np.concatenate(envs) if envs else np.zeros((0, len(CREST_BANDS), N_SUB), np.float32),
    )


@dataclass
class Fitted:
    """An enrolment and what the check found."""

    enrolment: Enrolment
    warnings: list[str] = field(default_factory=list)


def _general(rec: Recording, rule: Rule) -> dict[str, Any]:
    """What the general detector does on the recording with the station's rule."""
    stops: list[float] = []
    for a, b in rec.segments:
        eng = RuleEngine(Rules(rule), ["station"])
        for t in range(a, b):
            if eng.feed(rec.scores[t : t + 1], (t - a + 1) * HOP / RATE):
                stops.append(round((t + 1) * HOP / RATE, 2))
    s = rec.scores
    return {
        "windows": len(s),
        "max_score": round(float(s.max()), 4) if len(s) else None,
        "p99_score": round(float(np.quantile(s, 0.99)), 4) if len(s) else None,
        "windows_over_threshold": int((s >= rule.threshold).sum()),
        "stops": len(stops),
        "first_stops_s": stops[:10],
        "rule": rule.describe(),
    }


def _replay(rec: Recording, enrolment: Enrolment, rule: Rule) -> tuple[F32, int]:
    """The recording through the enrolled station's baseline: its novelty per window
    (``r``, before any scale: pass ``novelty_scale=1``) and the stops the rule then makes."""
    base = Baselines(
        [enrolment],
        thresholds=[rule.threshold],
        slow=[rule.slow],
        persist=[rule.persist],
        quick=[rule.quick],
        quick_db=[rule.quick_db],
    )
    logits = _logits(rec)
    novelty = np.zeros(len(rec.scores), np.float32)
    stops = 0
    for a, b in rec.segments:
        base.reset()
        eng = RuleEngine(Rules(rule), ["station"], [True])
        for t in range(a, b):
            f, s = rec.features[t : t + 1], rec.scores[t : t + 1]
            s = base.adjust(f, s, None, logits[t : t + 1])
            novelty[t] = base.last_novelty[0]
            own = base.last_novel if base.novelty_clause else None  # its own hits
            stops += len(eng.feed(s, (t - a + 1) * HOP / RATE, None, own))
    return novelty, stops


def _logits(rec: Recording) -> F32:
    return rec.logits if rec.logits is not None else logit_of(rec.scores)


def detector_range(rec: Recording) -> dict[str, float]:
    """The general detector's logit on ``rec`` (its calibration on this station): ``max``,
    ``p999``, ``p99``, ``p50`` (each within ``baseline.LOGIT_BOUND``), ``windows``; empty when
    the recording has no window."""
    if not len(rec.scores):
        return {}
    x = np.clip(_logits(rec).astype(np.float64), -LOGIT_BOUND, LOGIT_BOUND)
    q = np.quantile(x, [0.5, 0.99, 0.999])
    return {
        "max": round(float(x.max()), 4),
        "p999": round(float(q[2]), 4),
        "p99": round(float(q[1]), 4),
        "p50": round(float(q[0]), 4),
        "windows": float(len(x)),
    }


def rhythm_range(rec: Recording) -> dict[str, float]:
    """The healthy range of the rhythm statistic on ``rec`` (empty when it was not measured
    or no segment is longer than ``rhythm.WINDOWS``): ``max``, ``p999``, ``p50``,
    ``windows``."""
    if rec.rhythm is None:
        return {}
    full = [rec.rhythm[a + WINDOWS - 1 : b] for a, b in rec.segments if b - a >= WINDOWS]
    if not full:
        return {}
    r = np.concatenate(full).astype(np.float64)
    return {
        "max": round(float(r.max()), 4),
        "p999": round(float(np.quantile(r, 0.999)), 4),
        "p50": round(float(np.quantile(r, 0.5)), 4),
        "windows": float(len(r)),
    }


def slow_range(rec: Recording, mean: F32, sd: F32, alpha: float = SLOW_ALPHA) -> F32 | None:
    """Per feature, the highest the slow average of ``z = (features - mean) / sd``
    (``m += alpha (z - m)`` from 0 at each segment's start, as a run does) reached on
    ``rec`` past each segment's first ``3 / alpha`` windows, at least ``SLOW_FLOOR``; None
    when no segment is that long."""
    settle = round(3.0 / alpha)
    inv = np.float32(1.0) / sd
    top = np.full(N_FEATURES, -np.inf, np.float32)
    for a, b in rec.segments:
        if b - a <= settle:
            continue
        z = (rec.features[a:b] - mean) * inv
        m = np.zeros(N_FEATURES, np.float32)
        for t in range(b - a):
            m += np.float32(alpha) * (z[t] - m)
            if t >= settle:
                np.maximum(top, m, out=top)
    if not np.isfinite(top).all():
        return None
    out: F32 = np.maximum(top, np.float32(SLOW_FLOOR)).astype(np.float32)
    return out


def persist_range(rec: Recording, mean: F32, sd: F32) -> F32 | None:
    """The persist clause's scale: :func:`steady_range` over ``PERSIST_WINDOWS``."""
    return steady_range(rec, mean, sd, PERSIST_WINDOWS)


def steady_range(rec: Recording, mean: F32, sd: F32, windows: int) -> F32 | None:
    """Per feature, the highest the median of ``z = (features - mean) / sd`` over the last
    ``windows`` windows (a ring of zeros at each segment's start, as a run has) reached on
    ``rec`` once the ring is full, at least ``PERSIST_FLOOR``; None when no segment is
    longer than the ring (``steady.py``)."""
    w, k = windows, windows // 2
    inv = np.float32(1.0) / sd
    top = np.full(N_FEATURES, -np.inf, np.float32)
    for a, b in rec.segments:
        if b - a <= w:
            continue
        z = (rec.features[a:b] - mean) * inv
        pad = np.concatenate([np.zeros((w - 1, N_FEATURES), np.float32), z])
        for s in range(w - 1, b - a, 512):  # blocks of windows: (block, features, w) at a time
            view = np.lib.stride_tricks.sliding_window_view(pad[s : s + 512 + w - 1], w, axis=0)
            np.maximum(top, np.partition(view, k, axis=2)[:, :, k].max(axis=0), out=top)
    if not np.isfinite(top).all():
        return None
    out: F32 = np.maximum(top, np.float32(PERSIST_FLOOR)).astype(np.float32)
    return out


def _check(station: str, rec: Recording, general: dict[str, Any], accept_stops: bool) -> None:
    """Refuse what must not become a station's normal (:class:`InvalidRequest`)."""
    if rec.seconds < MIN_SECONDS:
        raise InvalidRequest(
            f"too little audio for {station!r}: {rec.seconds:.1f} s, need at least "
            f"{MIN_SECONDS:g} s of the station running healthy (a few minutes is better)"
        )
    if rec.rms < SILENT_RMS:
        raise InvalidRequest(f"the recording for {station!r} is silent (RMS {rec.rms:.1e})")
    if general["stops"] and not accept_stops:
        share = general["windows_over_threshold"] / max(general["windows"], 1)
        raise InvalidRequest(
            f"the general detector stops {station!r} {general['stops']} time(s) on this "
            f"recording (first at {general['first_stops_s'][0]} s, highest score "
            f"{general['max_score']}, {share:.0%} of the windows at or over the threshold): "
            "a faulty machine must not be enrolled as normal. If the machine has been "
            "checked and is healthy, --accept-stops enrols it anyway: the detector then "
            "stops this station only when it is surer than on this recording (and not at "
            "all when it is over the threshold on more than 1% of the recording: then only "
            "the station's own clauses stop it); a fault present now becomes its normal and "
            "no longer stops it"
        )


def _warnings(station: str, stops: int, residual: int) -> list[str]:
    out = []
    if stops:
        out.append(
            f"{station}: enrolled although the general detector stopped it {stops} time(s) "
            "on this recording (--accept-stops)"
        )
    if residual:
        out.append(
            f"{station}: still stops {residual} time(s) on its own recording with the "
            "enrolment (a sound in it unlike the rest of it); have the machine checked, "
            "or enrol on a longer recording"
        )
    return out


def fit(
    station: str,
    rec: Recording,
    *,
    rule: Rule | None = None,
    detector: Detector | None = None,
    accept_stops: bool = False,
    shift: float = SHIFT_MAX,
    extra: dict[str, Any] | None = None,
    station_model: bool = False,
    slow: bool = False,
    persist: bool = True,
    lines: bool = True,
    bearing: BearingOrders | None = None,
    quick: bool = True,
) -> Fitted:
    """Measure ``station``'s normal on ``rec`` (see the module doc for what is refused:
    :class:`InvalidRequest`). ``detector``: the one that made the scores, for the
    provenance; ``extra``: more provenance (e.g. how long was asked for);
    ``station_model``: also fit the station's own model on ``rec.audio``
    (``station_model.py``; the enrolment is then of format /4); ``slow``: measure the
    station's slow range (``slow_range``; format /5; a station with no segment of over
    ``3 / SLOW_ALPHA`` windows gets none); ``persist`` (the default): the median's range too
    (``persist_range``, and the slow range its veto needs; format /6); ``lines`` (the
    default, with ``persist``): the envelope's spectra too (``lines.lines_profile`` on
    ``rec.envelopes``; format /7; a recording without envelopes or too short gets none);
    ``bearing``: the station's bearing orders and shaft range, whose comb the lines then
    watch too (``orders.py``; format /10; needs ``rec.audio``); ``quick`` (the default,
    with held lines): the quick median's range (:func:`steady_range` over
    ``QUICK_WINDOWS``; format /12)."""
    rule = rule or Rule()
    general = _general(rec, rule) if rec.seconds >= MIN_SECONDS else {}
    _check(station, rec, general, accept_stops)
    f64 = rec.features.astype(np.float64)
    mean = f64.mean(axis=0).astype(np.float32)
    sd = np.maximum(f64.std(axis=0), SD_FLOOR).astype(np.float32)
    raw = Enrolment(station, mean, sd, NOVELTY_FLOOR, 0.0)
    novelty, _ = _replay(rec, raw, rule)  # max(m) / NOVELTY_FLOOR per window
    scale = float(np.quantile(novelty * NOVELTY_FLOOR, NOVELTY_QUANTILE))
    provenance = {
        "sources": [s.record() for s in rec.sources],
        "seconds": round(rec.seconds, 3),
        "rms_dbfs": round(20 * np.log10(rec.rms), 1),
        "detector": detector_identity(detector.path, detector.info) if detector else None,
        "features": N_FEATURES,
        **(extra or {}),
    }
    own = None
    if station_model:
        if rec.audio is None or len(rec.audio) < len(rec.scores) * HOP:
            raise InvalidRequest("a station model needs the recording's audio (listen keep_audio)")
        seed = int(hashlib.sha256(station.encode()).hexdigest()[:8], 16)
        own = fit_station_model(rec.audio, mean, sd, seed=seed)
    slow_scale = slow_range(rec, mean, sd) if slow or persist else None
    persist_scale = persist_range(rec, mean, sd) if persist and slow_scale is not None else None
    profile = None
    if lines and persist_scale is not None and rec.envelopes is not None:
        profile = lines_profile(rec.envelopes, rec.segments, rec.audio, bearing)
    if bearing is not None and (profile is None or profile.orders is None):
        raise InvalidRequest(
            f"the bearing's orders need the envelope lines and {rec.seconds:.1f} s is too "
            "short for them (or the median's range was not measured)"
        )
    quick_scale = None
    if quick and profile is not None and profile.hold > 1:
        quick_scale = steady_range(rec, mean, sd, QUICK_WINDOWS)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    general["accepted_stops"] = bool(general["stops"])
    enrolment = Enrolment(
        station,
        mean,
        sd,
        max(scale, NOVELTY_FLOOR),
        shift,
        provenance,
        general,
        created,
        rhythm_range(rec),
        detector_range(rec),
        own,
        slow_scale,
        SLOW_ALPHA,
        persist_scale,
        profile,
        quick_scale,
    )
    _, residual = _replay(rec, enrolment, rule)
    enrolment = replace(enrolment, general={**general, "stops_with_enrolment": residual})
    return Fitted(enrolment, _warnings(station, general["stops"], residual))
