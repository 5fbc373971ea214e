"""The outside set (``outside.py``) through the runtime path, with and without enrolment, and
the DCASE 2020 baseline on the same clips.

Each station is enrolled on its first ``enrol_s`` seconds (what ``guard enroll`` does,
refused when the general detector stops on them), then its scored part runs as a new run
through the detector, the baselines and the rules, all stations in one batch. Three ways:
``general`` (no enrolment), ``enrolled`` (the stations ``enroll`` accepts),
``enrolled_accepting_stops`` (every station, as with ``--accept-stops``), and each of the
two enrolled ways again with the rules' rhythm clause at ``baseline.RHYTHM_MARGIN``
(``enrolled_rhythm``, ``enrolled_accepting_stops_rhythm``; ``rhythm.py``, off by default),
and with the rules' slow clause at ``baseline.SLOW_BAR`` (``enrolled_slow``,
``enrolled_accepting_stops_slow``; off by default, Session 13, without the persist clause),
and without the persist clause that is on by default since Session 14
(``enrolled_no_persist``, ``enrolled_accepting_stops_no_persist``: the decision before it),
and without the quick clauses on by default since Sessions 38 and 39
(``enrolled_accepting_stops_no_quick``: the decision before them) or without the one in
decibels alone (``enrolled_accepting_stops_no_quick_db``: Session 38's decision).
With ``station_model``, ``enrolled_accepting_stops_station_model`` is the station's own
model *and* the persist clause (the default rule), ``..._station_model_no_persist`` the
model alone.
Per way, overall,
per machine family and per background: false stops (and on how many stations), misses,
clip AUC (each station's highest score in the scored part), window AUC, onset -> stop in
audio time (all faults, and those at -12 dB and louder).

``baseline="dcase2020"`` trains the autoencoder baseline (``dcase.py``) on the healthy clips
of the detector's own training set (the first ``dcase_clips`` clips of
``make_set(.., "train", seed=0, seconds=8)``, the healthy ones) and scores every station's
scored part: clip AUC beside the detector's.

``general_detector_on_healthy`` (overall and per family) says why an enrolment ``enroll``
accepts (no ``--accept-stops``) cannot remove the general detector's false stops here: the
share of each station's healthy enrolment windows at or over the rule's threshold, and, in
logit, the rule's statistic (the ``k``-th highest score of ``n`` consecutive windows: what
``k`` of ``n`` needs) at its highest on each healthy station and on each fault after its
onset. Where healthy stations reach what faults reach, only a calibration that absorbs the
recording's level (``--accept-stops``, ``baseline.py``) tells them apart, and it would absorb
a fault present from the start of the recording just the same.

Per station (``stations_detail``): its family, fault, level, onset, backgrounds, drive,
and under the default decision (``enrolled_accepting_stops``) its first stop after the onset
(ms from it), its stops before the onset and its highest score; and per way, where it
decides otherwise than the default, station by station (``vs_default``: the healthy
stations it stops that the default does not, and those it no longer stops; the faults it
catches that the default misses, and those it misses that the default catches). A clause or
a bar is picked on that: no healthy station stopped that the default does not stop.

``rtgate guard evaluate --set outside [--baseline dcase2020]`` prints the report.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from rtgate.apps.guard.baseline import RHYTHM_MARGIN, Enrolment
from rtgate.apps.guard.evaluate import roc_auc
from rtgate.apps.guard.evaluate_enrolment import (
    _enrol_all,
    _features,
    _Fleet,
    _metrics,
    _Outcome,
    _outcome,
    _run,
    _ways,
)
from rtgate.apps.guard.features import HOP, RATE, WindowFeatures
from rtgate.apps.guard.orders import BearingOrders
from rtgate.apps.guard.outside import (
    FAMILIES,
    SEED,
    Station,
    describe,
    make_station,
    make_stations,
)
from rtgate.apps.guard.rules import Rule, Rules
from rtgate.core.errors import InvalidRequest

__all__ = ["DEFAULT_WAY", "STRONG_DB", "bearing_of", "enrolled_on_day", "evaluate_outside"]

STRONG_DB = -12.0  # the delay goal is for faults at this level and louder
DEFAULT_WAY = "enrolled_accepting_stops"  # every station enrolled, the rules' defaults
SPEED_RANGE = (0.9, 1.4)  # x the nominal shaft speed: the range a user gives (known orders)


def _groups(stations: list[Station]) -> dict[str, np.ndarray]:
    fam = np.array([s.machine.family for s in stations])
    groups = {f"family: {f.name}": np.flatnonzero(fam == f.name) for f in FAMILIES}
    for kind in ("babble", "forklift", "compressor", "conveyor"):
        groups[f"background: {kind}"] = np.flatnonzero(
            [kind in s.machine.backgrounds for s in stations]
        )
    ramps = np.array([s.machine.ramp != 0 for s in stations])
    groups["variable-speed drive ramping"] = np.flatnonzero(ramps)
    return {k: v for k, v in groups.items() if len(v)}


def rule_logit(scores: npt.ArrayLike, k: int, n: int) -> npt.NDArray[np.float64]:
    """Per station (row) and window from the ``n``-th on: the ``k``-th highest score of the last
    ``n`` windows (a ``k`` of ``n`` rule fires when it reaches the threshold), in logit."""
    p = np.clip(np.asarray(scores, np.float64), 1e-9, 1 - 1e-9)
    kth = np.sort(sliding_window_view(p, n, axis=1), axis=2)[:, :, n - k]
    out: npt.NDArray[np.float64] = np.log(kth / (1.0 - kth))
    return out


def _quantiles(x: npt.NDArray[np.float64]) -> dict[str, float] | None:
    if not len(x):
        return None
    q = np.percentile(x, [10, 50, 90])
    return {
        "p10": round(float(q[0]), 2),
        "p50": round(float(q[1]), 2),
        "p90": round(float(q[2]), 2),
    }


def detector_on_healthy(
    enrolments: list[Enrolment],
    general: npt.NDArray[np.float32],
    onsets: npt.NDArray[Any],
    rule: Rule,
) -> dict[str, Any]:
    """What the general detector does on healthy audio beside what it does on faults (see
    the module doc). ``enrolments``: every station's, stops accepted (their ``general``
    record); ``general``: the general detector's scores on the scored parts."""
    share = np.array(
        [e.general["windows_over_threshold"] / max(e.general["windows"], 1) for e in enrolments]
    )
    stat = rule_logit(general, rule.k, rule.n)
    ends = (np.arange(rule.n - 1, general.shape[1]) + 1) * HOP / RATE
    starts = ends - rule.n * HOP / RATE  # where each span's first window starts
    healthy_span = ends[None, :] < onsets[:, None]
    fault_span = starts[None, :] >= onsets[:, None]
    faulty = np.isfinite(onsets)
    h_max = np.where(healthy_span, stat, -np.inf).max(axis=1)[~faulty]
    f_max = np.where(fault_span, stat, -np.inf).max(axis=1)[faulty]
    f_max = f_max[np.isfinite(f_max)]
    median_fault = float(np.median(f_max)) if len(f_max) else np.inf
    return {
        "threshold_logit": round(float(np.log(rule.threshold / (1 - rule.threshold))), 2),
        "enrolment_share_over_threshold": _quantiles(share),
        "stations_over_threshold_half_the_time": int((share >= 0.5).sum()),
        "healthy_rule_logit_max": _quantiles(h_max),
        "fault_rule_logit_max": _quantiles(f_max),
        "healthy_over_median_fault": int((h_max >= median_fault).sum()),
    }


def _dcase(
    stations: list[Station], enrol_w: int, n_clips: int, epochs: int, log: Any
) -> dict[str, Any]:
    from rtgate.apps.guard.dcase import Dcase2020, DcaseConfig
    from rtgate.apps.guard.simulate import make_set

    try:
        import torch  # noqa: F401  (the baseline trains with it)
    except ImportError:
        raise InvalidRequest("--baseline dcase2020 needs torch (the train extra)") from None

    healthy = [c.audio for c in make_set(n_clips, "train", seed=0, seconds=8.0) if c.fault is None]
    model = Dcase2020(DcaseConfig(epochs=epochs))
    model.fit(healthy, log=log)
    scored = [s.audio[enrol_w * HOP :] for s in stations]
    scores = model.score(scored)
    faulty = np.array([s.fault is not None for s in stations])
    thr = model.healthy_p99
    out: dict[str, Any] = {
        "trained_on": f"{len(healthy)} healthy training clips of 8 s",
        "epochs": epochs,
        "final_val_loss": round(model.history[-1]["val_loss"], 3),
        "clip_auc": round(roc_auc(scores, faulty), 4),
        "threshold_healthy_p99": round(float(thr), 3) if thr is not None else None,
        "healthy_over_threshold": int(((scores >= thr) & ~faulty).sum()) if thr else None,
        "faulty_under_threshold": int(((scores < thr) & faulty).sum()) if thr else None,
    }
    for name, idx in _groups(stations).items():
        out[name] = {"clip_auc": round(roc_auc(scores[idx], faulty[idx]), 4)}
    return out


def enrolled_on_day(station: Station, day: int, enrol_n: int) -> Station:
    """``station`` with its first ``enrol_n`` samples (what enrolment hears) taken from
    ``day``'s healthy recording of the same machine, the same length and speed profile; the
    scored part after them is unchanged."""
    m = station.machine
    other = make_station(m, len(station.audio) / RATE, None, 0.0, 0.0, day=day)
    audio = np.concatenate([other.audio[:enrol_n], station.audio[enrol_n:]])
    return replace(station, audio=audio)


def bearing_of(station: Station) -> BearingOrders:
    """What a user would give for an outside station: its bearing's defect orders (the
    simulator's geometry, as a catalogue prints it) and 0.9-1.4 x its nominal shaft speed
    (a drive's range)."""
    m = station.machine
    return BearingOrders.around(m.bearing.orders(), m.shaft_hz, *SPEED_RANGE)


def evaluate_outside(
    model: str | Path | None = None,
    n_stations: int = 100,
    seed: int = SEED,
    enrol_s: float = 30.0,
    score_s: float = 15.0,
    baseline: str | None = None,
    dcase_clips: int = 240,
    dcase_epochs: int = 100,
    log: Any = None,
    station_model: bool = False,
    enrol_day: int = 0,
    known_orders: bool = False,
) -> dict[str, Any]:
    """The report described in the module doc. ``station_model``: fit each station's own
    model too (``station_model.py``) and add the ways ``enrolled_station_model`` and
    ``enrolled_accepting_stops_station_model``. ``enrol_day``: enrol each station on another
    day's healthy recording of its machine (``outside.make_station``'s ``day``) instead of
    the first part of the recording that is scored (0). ``known_orders``: enrol each station
    with its bearing's defect orders and 0.9-1.4 x its nominal shaft speed
    (:func:`bearing_of`, format /11); the ways then decide with them (the rules' default
    ``orders`` and ``strong``; ``enrolled_accepting_stops_no_lines`` is then the orders
    without the every-rate lines), and two ways are added on the same enrolments:
    ``enrolled_accepting_stops_no_strong`` (the orders without their strong comb: Session
    35's decision) and ``enrolled_accepting_stops_no_orders`` (the orders off)."""
    if n_stations < 10 or enrol_s < 30 or score_s < 6:
        raise InvalidRequest("need >= 10 stations, enrol_s >= 30 and score_s >= 6")
    if baseline not in (None, "dcase2020"):
        raise InvalidRequest(f"unknown baseline {baseline!r} (dcase2020)")
    if enrol_day < 0:
        raise InvalidRequest(f"enrol_day must be >= 0, got {enrol_day}")
    stations = make_stations(n_stations, seed, enrol_s, score_s)
    enrol_w, score_w = int(enrol_s * RATE) // HOP, int(score_s * RATE) // HOP
    if enrol_day:
        stations = [enrolled_on_day(s, enrol_day, enrol_w * HOP) for s in stations]
    fleet = _Fleet(stations, [",".join(s.machine.backgrounds) for s in stations], enrol_w, score_w)
    bearings = [bearing_of(s) for s in stations] if known_orders else None
    own = [e for e, _ in _enrol_all(fleet, model, station_model, bearings)]
    fitted = [replace(e, station_model=None) for e in own]  # the same numbers without it
    accepted = [None if e.general.get("stops") else e for e in fitted]
    feats, rhythm, envs = _features(WindowFeatures(), stations, enrol_w, enrol_w + score_w)
    onsets = np.array([np.inf if s.onset_s is None else s.onset_s - enrol_s for s in stations])
    level = np.array([s.fault_rms_db if s.fault is not None else np.nan for s in stations])
    report: dict[str, Any] = {
        "set": "outside",
        **describe(),
        "seed": seed,
        "stations": n_stations,
        "enrol_s": enrol_s,
        "score_s": score_s,
        "enrol_day": enrol_day,
        "known_orders": known_orders,
        "fault_rms_db": [-22.0, -6.0],
        "refused_by_enroll": sum(1 for e in accepted if e is None),
    }
    ways = _ways(n_stations, accepted, fitted)
    ways["enrolled_accepting_stops_rhythm"] = (list(fitted), Rules(Rule(rhythm=RHYTHM_MARGIN)))
    if known_orders:  # the decision without them, beside; ..._no_lines is the orders alone
        ways["enrolled_accepting_stops_no_orders"] = (list(fitted), Rules(Rule(orders=0)))
        ways["enrolled_accepting_stops_no_strong"] = (list(fitted), Rules(Rule(strong=0)))
    if station_model:
        ways["enrolled_station_model"] = (
            [None if e.general.get("stops") else e for e in own],
            Rules(),
        )
        ways["enrolled_accepting_stops_station_model"] = (list(own), Rules())
        ways["enrolled_accepting_stops_station_model_no_persist"] = (
            list(own),
            Rules(Rule(persist=0)),
        )
    groups = _groups(stations)
    rule = Rules().default
    outcomes: dict[str, _Outcome] = {}
    for name, (enrolments, rules) in ways.items():
        seen, stops = _run(fleet, feats, enrolments, rules, model, rhythm, envs)
        outcomes[name] = _outcome(seen, stops, onsets)
        if name == "general":
            on_healthy = {"all": detector_on_healthy(fitted, seen, onsets, rule)}
            for g, idx in groups.items():
                sub = [fitted[i] for i in idx]
                on_healthy[g] = detector_on_healthy(sub, seen[idx], onsets[idx], rule)
            report["general_detector_on_healthy"] = on_healthy
        res = _metrics(seen, stops, onsets, level, STRONG_DB)
        for g, idx in groups.items():
            keep = set(idx.tolist())
            sub = [(int(np.searchsorted(idx, i)), t) for i, t in stops if i in keep]
            res[g] = _metrics(seen[idx], sub, onsets[idx], level[idx], STRONG_DB)
        report[name] = res
    report["stations_detail"] = _detail(stations, onsets, outcomes[DEFAULT_WAY])
    for name, outcome in outcomes.items():
        if name != DEFAULT_WAY:
            report[name]["vs_default"] = _versus(outcome, outcomes[DEFAULT_WAY], onsets)
    if baseline == "dcase2020":
        report["baseline_dcase2020"] = _dcase(stations, enrol_w, dcase_clips, dcase_epochs, log)
    out: dict[str, Any] = _no_nan(report)
    return out


def _detail(stations: list[Station], onsets: npt.NDArray[np.float64],
            o: _Outcome) -> list[dict[str, Any]]:  # fmt: skip
    """Each station's truth and the default way's decision on it (module doc)."""
    out = []
    for i, s in enumerate(stations):
        faulty = s.fault is not None
        out.append(
            {
                "station": i,
                "family": s.machine.family,
                "fault": s.fault,
                "fault_rms_db": round(s.fault_rms_db, 1) if faulty else None,
                "onset_s": round(float(onsets[i]), 3) if faulty else None,
                "backgrounds": list(s.machine.backgrounds),
                "drive_ramp": round(s.machine.ramp, 3),
                "onset_to_stop_ms": (
                    round(1000 * float(o.first[i] - onsets[i]), 1)
                    if faulty and np.isfinite(o.first[i])
                    else None
                ),
                "stops_before_onset": int(o.early[i]),
                "max_score": round(float(o.top[i]), 4),
            }
        )
    return out


def _versus(way: _Outcome, default: _Outcome, onsets: npt.NDArray[np.float64]) -> dict[str, Any]:
    """Where ``way`` decides otherwise than ``default``, station by station (module doc):
    a station is stopped healthy when it has a stop before its onset (any stop, healthy)."""
    faulty = np.isfinite(onsets)
    was, now = default.early > 0, way.early > 0
    caught_was, caught_now = np.isfinite(default.first), np.isfinite(way.first)

    def idx(mask: npt.NDArray[np.bool_]) -> list[int]:
        return [int(i) for i in np.flatnonzero(mask)]

    return {
        "stopped_healthy_more": idx(now & ~was),
        "stopped_healthy_fewer": idx(was & ~now),
        "faults_caught_more": idx(faulty & caught_now & ~caught_was),
        "faults_missed_more": idx(faulty & caught_was & ~caught_now),
    }


def _no_nan(x: Any) -> Any:
    """NaN (an AUC of a group with one class only) as null, so the report is JSON."""
    if isinstance(x, dict):
        return {k: _no_nan(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_no_nan(v) for v in x]
    if isinstance(x, float) and x != x:
        return None
    return x
