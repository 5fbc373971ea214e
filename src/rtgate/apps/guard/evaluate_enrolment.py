"""Enrolment on motors outside every training range: false stops, misses, AUC with and without.

Each station is a motor whose parameters lie outside the ranges the simulator draws the
training motors from (:data:`OUTSIDE`, beside the training ranges), but for the housing
resonance of a third of them (inside 2-6.5 kHz: the detector's envelope bands start at 2 kHz,
and a ring below them it barely hears, which is a family of its own), with two kinds of
noise the simulator never makes (speech babble; a forklift's rumble and reversing beeper)
on a third of the stations each. A station is one recording of ``enrol_s + score_s`` seconds;
half of the stations develop a bearing fault at a random moment of the scored part.

Each station is enrolled on its first ``enrol_s`` seconds with :func:`enrol.fit` (what
``guard enroll`` does: refused when the general detector stops on them), then the scored
part runs as a new run (fresh detector state) through the detector, the baselines and the
rules, all stations in one batch, as ``guard run`` does. Three ways:

- ``general``: no enrolment;
- ``enrolled``: the stations ``guard enroll`` accepts are enrolled, the others run without;
- ``enrolled_accepting_stops``: every station enrolled, as with ``--accept-stops``;
- ``enrolled_rhythm``: as ``enrolled``, with the rules' rhythm clause at
  ``baseline.RHYTHM_MARGIN`` (``rhythm.py``; off by default);
- ``enrolled_novelty_N``: as ``enrolled``, with the rules' novelty clause at N;
- ``enrolled_slow``, ``enrolled_accepting_stops_slow``: as ``enrolled`` and
  ``enrolled_accepting_stops``, with the rules' slow clause at ``baseline.SLOW_BAR``
  (``Rule.slow``; off by default) and without the persist clause (Session 13's way);
- ``enrolled_no_persist``, ``enrolled_accepting_stops_no_persist``: the enrolled ways
  without the persist clause (``Rule.persist``, on by default since Session 14): the
  decision before it;
- ``enrolled_accepting_stops_no_quick``: every station without the quick clauses
  (``Rule.quick``, on by default since Session 38, and ``Rule.quick_db``, since Session
  39): the decision before them;
- ``enrolled_accepting_stops_no_quick_db``: every station without the quick clause in
  decibels (Session 38's decision).

Reported per way, overall and per family (shaft speed, housing resonance, extra noise):
false stops (and on how many stations), misses (a false stop's cool-down may cost a fault),
clip and window AUC of the score the rules see, onset -> stop in audio time.

``python -m rtgate.apps.guard.evaluate_enrolment --stations 96 --seed 1 --enrol-s 60
--score-s 30`` prints the report as JSON.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple, Protocol, cast

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.baseline import RHYTHM_MARGIN, SLOW_BAR, Baselines, Enrolment
from rtgate.apps.guard.detector import Detector
from rtgate.apps.guard.enrol import Recording, Source, fit
from rtgate.apps.guard.evaluate import roc_auc
from rtgate.apps.guard.features import CREST_BANDS, HOP, N_SUB, RATE, WindowFeatures
from rtgate.apps.guard.orders import BearingOrders
from rtgate.apps.guard.rhythm import Rhythm
from rtgate.apps.guard.rules import Rule, RuleEngine, Rules
from rtgate.apps.guard.simulate import FAULTS, Bearing, Clip, Motor, draw_motor, make_clip
from rtgate.core.errors import InvalidRequest

__all__ = ["OUTSIDE", "evaluate_enrolment", "outside_clip", "outside_motor"]

F32 = npt.NDArray[np.float32]

# parameter: (training range in simulate.py, the ranges drawn here)
OUTSIDE: dict[str, tuple[str, str]] = {
    "shaft_hz": ("14-20, 27-35, 44-52, 60-66 (unseen 20-27, 35-44, 52-60)", "6-13, 67-80"),
    "bearing": (
        "6203 6205 6206 6208 6305 6309 7205 (unseen 6204 6207 6306 6310 7206)",
        "6001 6212 6016 7310 and a 16-ball one",
    ),
    "fan_blades": ("5-12", "3-4, 13-16"),
    "rotor_slots": ("22-45", "16-21, 47-60"),
    "bearing_res_hz": ("2000-6500", "1200-2000, 6500-7800 (a third: 2000-6500)"),
    "damping": ("0.03-0.1", "0.012-0.03, 0.1-0.16"),
    "level_dbfs": ("-38..-14", "-46..-38, -14..-8"),
    "noise_db": ("-12..3", "-20..-12, 3..8"),
    "impacts_per_s": ("0, 0.5, 2", "1, 3"),
    "extra_noise": ("none", "speech babble (1/3), forklift rumble and beeper (1/3)"),
}
BEARINGS_OUTSIDE = (
    Bearing("6001", 8, 4.76, 19.0),
    Bearing("6212", 10, 15.88, 85.0),
    Bearing("6016", 14, 12.7, 105.0),
    Bearing("7310", 13, 17.46, 80.0, 40.0),
    Bearing("16-ball", 16, 9.0, 70.0),
)


def _either(rng: np.random.Generator, a: tuple[float, float], b: tuple[float, float]) -> float:
    lo, hi = a if rng.random() < 0.5 else b
    return float(rng.uniform(lo, hi))


def outside_motor(rng: np.random.Generator) -> Motor:
    """A motor with every parameter outside the training population's ranges, but the
    housing resonances of a third of them (see the module doc)."""
    res = [(1200.0, 2000.0), (2000.0, 6500.0), (6500.0, 7800.0)][int(rng.integers(3))]
    return Motor(
        shaft_hz=_either(rng, (6.0, 13.0), (67.0, 80.0)),
        line_hz=float(rng.choice([50.0, 60.0])),
        bearing=BEARINGS_OUTSIDE[int(rng.integers(len(BEARINGS_OUTSIDE)))],
        fan_blades=int(rng.choice([3, 4, 13, 14, 15, 16])),
        rotor_slots=int(rng.choice([*range(16, 22), *range(47, 61)])),
        bearing_res_hz=tuple(float(f) for f in rng.uniform(*res, int(rng.integers(1, 3)))),
        damping=_either(rng, (0.012, 0.03), (0.1, 0.16)),
        level_dbfs=_either(rng, (-46.0, -38.0), (-14.0, -8.0)),
        noise_db=_either(rng, (-20.0, -12.0), (3.0, 8.0)),
        seed=int(rng.integers(2**31)),
    )


def _band_noise(rng: np.random.Generator, n: int, lo: float, hi: float) -> npt.NDArray[Any]:
    spec = rng.standard_normal(n // 2 + 1) + 1j * rng.standard_normal(n // 2 + 1)
    f = np.fft.rfftfreq(n, 1 / RATE)
    x = np.fft.irfft(spec * ((f >= lo) & (f <= hi)), n)
    return x / (np.std(x) + 1e-12)


def _envelope(rng: np.random.Generator, n: int, rate_hz: float, duty: float) -> npt.NDArray[Any]:
    """A random on/off gate switching about ``rate_hz`` times a second, its edges smoothed
    over a quarter of a step (a moving average)."""
    steps = int(n / RATE * rate_hz) + 2
    on = (rng.random(steps) < duty).astype(np.float64)
    gate = np.repeat(on, n // (steps - 1) + 1)[:n]
    k = max(1, int(RATE / rate_hz / 4))
    c = np.concatenate([[0.0], np.cumsum(gate)])
    out: npt.NDArray[Any] = (c[k:] - c[:-k]) / k
    return np.concatenate([out, np.full(k - 1, out[-1])])


def _babble(rng: np.random.Generator, n: int) -> npt.NDArray[Any]:
    """Two or three people talking: voice-band noise in syllables, pitch-buzzed."""
    t = np.arange(n) / RATE
    x = np.zeros(n)
    for _ in range(int(rng.integers(2, 4))):
        f0 = rng.uniform(90, 240)
        buzz = 1 + 0.6 * np.sign(np.sin(2 * np.pi * f0 * t))
        x += _band_noise(rng, n, 250, 3400) * buzz * _envelope(rng, n, rng.uniform(3, 6), 0.6)
    return x


def _forklift(rng: np.random.Generator, n: int) -> npt.NDArray[Any]:
    """An engine's rumble coming and going, and a reversing beeper now and then."""
    t = np.arange(n) / RATE
    rumble = _band_noise(rng, n, 20, 300) * (1 + 0.5 * np.sin(2 * np.pi * 0.2 * t))
    beep = np.sin(2 * np.pi * rng.uniform(900, 1300) * t) * (np.sin(2 * np.pi * t) > 0.3)
    out: npt.NDArray[Any] = rumble + 0.5 * beep * _envelope(rng, n, 0.1, 0.5)
    return out


def outside_clip(
    rng: np.random.Generator, seconds: float, fault_from: float | None, outside: bool = True
) -> tuple[Clip, str]:
    """One station's recording; a fault starts after ``fault_from`` seconds (None: healthy).
    ``outside``: a motor of :func:`outside_motor` with the extra noises; else one of the
    simulator's ``unseen`` population as the simulator makes it. Returns the clip and the
    extra noise it has."""
    motor = outside_motor(rng) if outside else draw_motor(rng, "unseen")
    fault = FAULTS[int(rng.integers(3))] if fault_from is not None else None
    onset = float(rng.uniform(fault_from + 1.0, seconds - 3.0)) if fault_from is not None else 0.0
    clip = make_clip(
        motor,
        seconds,
        fault=fault,
        onset_s=onset,
        severity_db=float(rng.uniform(4.0, 16.0)),
        impact_rate_hz=float(rng.choice([1.0, 3.0] if outside else [0.0, 0.5, 2.0])),
        seed=int(rng.integers(2**31)),
    )
    kind = ["none", "babble", "forklift"][int(rng.integers(3))] if outside else "none"
    if kind != "none":
        n, extra_rng = len(clip.audio), np.random.default_rng(int(rng.integers(2**31)))
        extra = _babble(extra_rng, n) if kind == "babble" else _forklift(extra_rng, n)
        rms = float(np.sqrt(np.mean(np.square(clip.audio, dtype=np.float64))))
        gain = rms * 10 ** (float(rng.uniform(-10.0, 0.0)) / 20) / (np.std(extra) + 1e-12)
        audio = np.clip(clip.audio + gain * extra, -1.0, 1.0).astype(np.float32)
        clip = Clip(audio, motor, clip.fault, clip.onset_s, clip.severity_db, clip.impacts_s)
    return clip, kind


class _Recorded(Protocol):
    @property
    def audio(self) -> F32: ...


@dataclass
class _Fleet:
    clips: Sequence[_Recorded]
    noise: list[str]
    enrol_w: int  # windows of the enrolment part
    score_w: int


def _features(
    wf: WindowFeatures, clips: Sequence[_Recorded], a: int, b: int
) -> tuple[F32, F32, F32]:
    """Features ``(stations, windows a..b, N_FEATURES)``, the rhythm statistic
    ``(stations, windows a..b)`` (its ring starting afresh at ``a``, as a new run does) and
    the band envelopes ``(stations, windows a..b, bands, N_SUB)`` (``lines.py``)."""
    n = len(clips)
    audio = np.stack([c.audio[a * HOP : b * HOP] for c in clips]).reshape(n, b - a, HOP)
    envs = np.zeros((n, b - a, len(CREST_BANDS), N_SUB), np.float32)
    env = np.zeros((n, len(CREST_BANDS), N_SUB), np.float32)
    rhythm = Rhythm(n)
    feats, rh = [], []
    for t in range(b - a):
        feats.append(wf(audio[:, t], env))
        envs[:, t] = env
        rh.append(rhythm.step(env).copy())
    return np.stack(feats, axis=1), np.stack(rh, axis=1), envs


def _enrol_all(
    fleet: _Fleet,
    model: str | Path | None,
    station_model: bool = False,
    bearings: Sequence[BearingOrders] | None = None,
) -> list[tuple[Enrolment, list[str]]]:
    """Each station fitted on its enrolment part, stops accepted (the refusal is read from
    the warnings), with its slow range (format /5: the ways without the slow clause decide
    as with /3); the scores come from one batched detector. ``station_model``: each with
    its own model too (``station_model.py``); ``bearings``: each station's bearing orders
    (format /10, ``orders.py``)."""
    n, wf = len(fleet.clips), WindowFeatures()
    det = Detector(model, n_streams=n)
    feats, rhythm, envs = _features(wf, fleet.clips, 0, fleet.enrol_w)
    scores = np.zeros((n, fleet.enrol_w), np.float32)
    logits = np.zeros((n, fleet.enrol_w), np.float32)
    for t in range(fleet.enrol_w):
        scores[:, t] = det.step(feats[:, t])
        logits[:, t] = det.last_logit
    out = []
    for i, clip in enumerate(fleet.clips):
        x = clip.audio[: fleet.enrol_w * HOP].astype(np.float64)
        src = Source(f"station{i}", "simulated", RATE, seconds=fleet.enrol_w * HOP / RATE)
        keep = station_model or bearings is not None
        audio = clip.audio[: fleet.enrol_w * HOP] if keep else None
        rec = Recording(
            feats[i],
            scores[i],
            [(0, fleet.enrol_w)],
            [src],
            float(np.std(x)),
            rhythm[i],
            logits[i],
            audio,
            envs[i],
        )
        bearing = None if bearings is None else bearings[i]
        fitted = fit(
            f"s{i:03d}",
            rec,
            accept_stops=True,
            station_model=station_model,
            slow=True,
            bearing=bearing,
        )
        out.append((fitted.enrolment, fitted.warnings))
    return out


def _run(
    fleet: _Fleet,
    feats: F32,
    enrolments: list[Enrolment | None],
    rules: Rules,
    model: str | Path | None,
    rhythm: F32 | None = None,
    envelopes: F32 | None = None,
) -> tuple[F32, list[tuple[int, float]]]:
    """The scored part as one new run of every station, as ``Guard.process`` steps them:
    the scores the rules saw and every stop ``(station, audio seconds from the part's
    start)``. ``rhythm``: the statistic of each window (``_features``; None: no rhythm
    clause); ``envelopes``: each window's band envelopes (``_features``; None: no envelope
    lines); as in ``Guard.process``, a window's rhythm or lines hit counts from the next
    window."""
    n = len(fleet.clips)
    names = [f"s{i:03d}" for i in range(n)]
    det = Detector(model, n_streams=n)
    per = [rules.for_station(s) for s in names]
    base = Baselines(
        enrolments,
        [r.novelty for r in per],
        [r.rhythm for r in per],
        [r.threshold for r in per],
        [r.slow for r in per],
        [r.persist for r in per],
        [r.lines for r in per],
        [r.orders for r in per],
        [r.strong for r in per],
        [r.quick for r in per],
        [r.quick_db for r in per],
    )
    lined = np.zeros(n, dtype=bool)
    audio = None  # the scored part's windows, for the stations with known bearing orders
    if (base.orders_margin > 0).any():
        a, b = fleet.enrol_w * HOP, (fleet.enrol_w + fleet.score_w) * HOP
        audio = np.stack([c.audio[a:b] for c in fleet.clips]).reshape(n, fleet.score_w, HOP)
    eng = RuleEngine(rules, names, [e is not None for e in enrolments])
    seen = np.zeros((n, fleet.score_w), np.float32)
    stops = []
    for t in range(fleet.score_w):
        s = base.adjust(feats[:, t], det.step(feats[:, t]), None, det.last_logit)
        novel = base.last_novel if base.novelty_clause else None
        if rhythm is not None and base.rhythm_clause and t:
            hit = base.rhythmic(rhythm[:, t - 1])
            novel = hit if novel is None else novel | hit
        if envelopes is not None and base.lines_clause:
            novel = lined if novel is None else novel | lined
            lined = base.step_lines(envelopes[:, t], None, None if audio is None else audio[:, t])
        seen[:, t] = s
        ends = (t + 1) * HOP / RATE
        stops += [(d.index, d.window_end_ts) for d in eng.feed(s, ends, None, novel)]
    return seen, stops


class _Outcome(NamedTuple):
    """One way's decision, per station: its first stop at or after the onset (audio seconds
    of the scored part; NaN: none), its stops before the onset, its highest score."""

    first: npt.NDArray[np.float64]
    early: npt.NDArray[np.int64]
    top: npt.NDArray[np.float32]


def _outcome(seen: npt.NDArray[np.float32], stops: list[tuple[int, float]],
             onsets: npt.NDArray[np.floating[Any]]) -> _Outcome:  # fmt: skip
    first = np.full(len(onsets), np.nan)
    early = np.zeros(len(onsets), np.int64)
    for i, t in stops:
        if t < onsets[i]:
            early[i] += 1
        elif np.isnan(first[i]):
            first[i] = t
    return _Outcome(first, early, seen.max(axis=1))


def _metrics(
    seen: F32, stops: list[tuple[int, float]], onsets: F32, sev: F32, strong_db: float = 12.0
) -> dict[str, Any]:
    ends = (np.arange(seen.shape[1]) + 1) * HOP / RATE
    faulty = np.isfinite(onsets)
    o = _outcome(seen, stops, onsets)
    caught = np.flatnonzero(np.isfinite(o.first))
    delays = [1000 * float(o.first[i] - onsets[i]) for i in caught]
    healthy = ends[None, :] < onsets[:, None]
    fault_w = ends[None, :] >= onsets[:, None] + 0.04
    keep = healthy | fault_w
    strong = [1000 * float(o.first[i] - onsets[i]) for i in caught if sev[i] >= strong_db]
    return {
        "stations": len(onsets),
        "faulty": int(faulty.sum()),
        "false_stops": int(o.early.sum()),
        "stations_with_false_stops": int((o.early > 0).sum()),
        "misses": int(faulty.sum()) - len(caught),
        "clip_auc": round(roc_auc(seen.max(axis=1), faulty), 4),
        "window_auc": round(roc_auc(seen[keep], fault_w[keep]), 4),
        "onset_to_stop_ms": {"p50": _pct(delays, 50), "p95": _pct(delays, 95)},
        f"onset_to_stop_ms_{strong_db:g}dB_up": {
            "n": len(strong),
            "p50": _pct(strong, 50),
            "p95": _pct(strong, 95),
        },
    }


def _pct(xs: list[float], q: float) -> float | None:
    return round(float(np.percentile(xs, q)), 1) if xs else None


def _families(fleet: _Fleet) -> dict[str, npt.NDArray[np.int64]]:
    """Stations by shaft speed, by housing resonance and by the extra noise (the empty
    families left out)."""
    clips = cast(list[Clip], fleet.clips)  # this module's fleets are simulate.py's clips
    shaft = np.array([c.motor.shaft_hz for c in clips])
    res = np.array([c.motor.bearing_res_hz[0] for c in clips])
    noise = np.array(fleet.noise)
    fams = {
        "shaft 6-13 Hz": np.flatnonzero(shaft < 14),
        "shaft 20-40 Hz": np.flatnonzero((shaft >= 14) & (shaft < 40)),
        "shaft 40-60 Hz": np.flatnonzero((shaft >= 40) & (shaft < 66)),
        "shaft 67-80 Hz": np.flatnonzero(shaft >= 66),
        "resonance 1.2-2 kHz": np.flatnonzero(res < 2000),
        "resonance 2-6.5 kHz (as trained)": np.flatnonzero((res >= 2000) & (res <= 6500)),
        "resonance 6.5-7.8 kHz": np.flatnonzero(res > 6500),
        **{f"noise: {k}": np.flatnonzero(noise == k) for k in ("none", "forklift", "babble")},
    }
    return {k: v for k, v in fams.items() if len(v)}


def _simulate(
    n_stations: int, seed: int, enrol_s: float, score_s: float, outside: bool = True
) -> _Fleet:
    rng = np.random.default_rng([seed, 18 if outside else 19])
    secs = enrol_s + score_s
    made = [outside_clip(rng, secs, enrol_s if i % 2 else None, outside) for i in range(n_stations)]
    enrol_w, score_w = int(enrol_s * RATE) // HOP, int(score_s * RATE) // HOP
    return _Fleet([c for c, _ in made], [k for _, k in made], enrol_w, score_w)


def evaluate_enrolment(
    n_stations: int = 96,
    seed: int = 1,
    enrol_s: float = 60.0,
    score_s: float = 30.0,
    model: str | Path | None = None,
    novelty: float = 4.0,
    population: str = "outside",
    station_model: bool = False,
) -> dict[str, Any]:
    """Simulate the stations, enrol and score them; the report (module doc).
    ``novelty``: the rules' novelty clause of the last way (0: leave that way out);
    ``population``: ``outside`` (the default) or ``unseen``, the simulator's held-out
    motors, for what an enrolment costs on machines like the training set;
    ``station_model``: fit each station's own model too and add the ways
    ``enrolled_station_model`` and ``enrolled_accepting_stops_station_model``."""
    if n_stations < 4 or enrol_s < 30 or score_s < 5:
        raise InvalidRequest("need >= 4 stations, enrol_s >= 30 and score_s >= 5")
    if population not in ("outside", "unseen"):
        raise InvalidRequest(f"population must be outside or unseen, got {population!r}")
    fleet = _simulate(n_stations, seed, enrol_s, score_s, population == "outside")
    own = [e for e, _ in _enrol_all(fleet, model, station_model)]
    fitted = [replace(e, station_model=None) for e in own]  # as without: the same numbers
    accepted = [None if e.general.get("stops") else e for e in fitted]
    feats, rhythm, envs = _features(
        WindowFeatures(), fleet.clips, fleet.enrol_w, fleet.enrol_w + fleet.score_w
    )
    clips = cast(list[Clip], fleet.clips)
    onsets = np.array([np.inf if c.onset_s is None else c.onset_s - enrol_s for c in clips])
    sev = np.array([c.severity_db for c in clips])
    ways = _ways(n_stations, accepted, fitted)
    if novelty:
        ways[f"enrolled_novelty_{novelty:g}"] = (accepted, Rules(Rule(novelty=novelty)))
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
    report: dict[str, Any] = {
        "seed": seed,
        "population": population,
        "stations": n_stations,
        "enrol_s": enrol_s,
        "score_s": score_s,
        "outside_ranges": {k: v[1] for k, v in OUTSIDE.items()},
        "refused_by_enroll": sum(1 for e in accepted if e is None),
    }
    for name, (enrolments, rules) in ways.items():
        seen, stops = _run(fleet, feats, enrolments, rules, model, rhythm, envs)
        res = _metrics(seen, stops, onsets, sev)
        for fam, idx in _families(fleet).items():
            keep = set(idx.tolist())
            sub = [(int(np.searchsorted(idx, i)), t) for i, t in stops if i in keep]
            res[fam] = _metrics(seen[idx], sub, onsets[idx], sev[idx])
        report[name] = res
    return report


def main(argv: list[str] | None = None) -> None:
    """Print :func:`evaluate_enrolment` as JSON."""
    ap = argparse.ArgumentParser(prog="python -m rtgate.apps.guard.evaluate_enrolment")
    ap.add_argument("model", nargs="?", default=None)
    ap.add_argument("--stations", type=int, default=96)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--enrol-s", type=float, default=60.0)
    ap.add_argument("--score-s", type=float, default=30.0)
    ap.add_argument("--novelty", type=float, default=4.0, help="the novelty clause's way (0: none)")
    ap.add_argument("--population", choices=["outside", "unseen"], default="outside")
    ap.add_argument(
        "--station-model", action="store_true", help="also each station's own model (format /4)"
    )
    args = ap.parse_args(argv)
    report = evaluate_enrolment(
        args.stations,
        args.seed,
        args.enrol_s,
        args.score_s,
        args.model,
        args.novelty,
        args.population,
        args.station_model,
    )
    print(json.dumps(report, indent=1))


Ways = dict[str, tuple[list[Enrolment | None], Rules]]


def _ways(n_stations: int, accepted: list[Enrolment | None], fitted: Sequence[Enrolment]) -> Ways:
    """The ways both evaluations replay: no enrolment, the stations ``enroll`` accepts, every
    station (``fitted``), and those with the rhythm clause, without the persist clause,
    without the envelope lines, without both quick clauses (Session 37's decision), without
    the one in decibels (Session 38's) and with Session 13's slow clause instead of the
    persist clause."""
    return {
        "general": ([None] * n_stations, Rules()),
        "enrolled": (accepted, Rules()),
        "enrolled_accepting_stops": (list(fitted), Rules()),
        "enrolled_rhythm": (accepted, Rules(Rule(rhythm=RHYTHM_MARGIN))),
        "enrolled_no_persist": (accepted, Rules(Rule(persist=0))),
        "enrolled_accepting_stops_no_persist": (list(fitted), Rules(Rule(persist=0))),
        "enrolled_accepting_stops_no_lines": (list(fitted), Rules(Rule(lines=0))),
        "enrolled_accepting_stops_no_quick": (list(fitted), Rules(Rule(quick=0, quick_db=0))),
        "enrolled_accepting_stops_no_quick_db": (list(fitted), Rules(Rule(quick_db=0))),
        "enrolled_slow": (accepted, Rules(Rule(slow=SLOW_BAR, persist=0))),
        "enrolled_accepting_stops_slow": (list(fitted), Rules(Rule(slow=SLOW_BAR, persist=0))),
    }


if __name__ == "__main__":  # after every definition: ``_ways`` above is read by main
    main()
