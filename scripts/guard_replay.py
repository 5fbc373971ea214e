"""Replay the outside set's scored part through ``Baselines`` and ``RuleEngine`` offline.

``dump``: one seed's stations (``outside.make_stations``), every station enrolled on its
first 30 s as with ``--accept-stops`` (``evaluate_enrolment._enrol_all``), the scored part's
features, and the general detector's scores and logits of every scored window, saved once
(``/tmp/guard_replay/S.npz`` and ``S.pkl``). ``replay``: the saved windows through the
baselines and the rules of a variant, as ``evaluate_enrolment._run`` steps them (the same
hits: the detector's outputs are the saved ones), and the way's false stops, misses and
onset -> stop. A variant is a ``Rule`` keyword set (``instant=0``, ``k=2``, ...), with
``PERSIST_*`` constants of ``baseline.py`` patched for the run (``persist_mid_veto=2``).

    PYTHONPATH=src python scripts/guard_replay.py dump --seed 1 [--stations 50]
    PYTHONPATH=src python scripts/guard_replay.py replay --seed 1 --rule instant=0 [--detail]
"""

from __future__ import annotations

import argparse
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.guard import baseline as bl
from rtgate.apps.guard.baseline import Baselines
from rtgate.apps.guard.detector import Detector
from rtgate.apps.guard.evaluate_enrolment import _enrol_all, _features, _Fleet, _metrics
from rtgate.apps.guard.evaluate_outside import STRONG_DB, _groups
from rtgate.apps.guard.features import HOP, RATE, WindowFeatures
from rtgate.apps.guard.outside import FAMILIES, Station, draw_machine, make_station
from rtgate.apps.guard.rules import Rule, RuleEngine, Rules
from rtgate.apps.guard.simulate import FAULTS

OUT = Path("/tmp/guard_replay")


def stations_of(
    n: int, seed: int, enrol_s: float, score_s: float, only: set[int] | None, want: str | None
) -> tuple[list[Station], list[int]]:
    """``make_stations``' draws in its order, rendering only the stations in ``only`` (or
    whose family and backgrounds contain every word of ``want``, healthy or ``:faulty``):
    the same stations, at a fraction of the cost."""
    rng = np.random.default_rng([seed, 2018])
    out, idx = [], []
    for i in range(n):
        m = draw_machine(rng, FAMILIES[i % len(FAMILIES)])
        faulty = (i // len(FAMILIES)) % 2 == 1
        fault = FAULTS[int(rng.integers(3))] if faulty else None
        onset = enrol_s + float(rng.uniform(2.0, score_s - 3.0))
        level = float(rng.uniform(-22.0, -6.0))
        if only is not None and i not in only:
            continue
        if want is not None:
            words = want.split(",")
            tags = [m.family, *m.backgrounds, "faulty" if faulty else "healthy"]
            if not all(any(w in t for t in tags) for w in words):
                continue
        out.append(make_station(m, enrol_s + score_s, fault, onset, level))
        idx.append(i)
    return out, idx


def dump(
    seed: int,
    n: int,
    enrol_s: float = 30.0,
    score_s: float = 15.0,
    only: set[int] | None = None,
    want: str | None = None,
    tag: str = "",
) -> None:
    stations, index = stations_of(n, seed, enrol_s, score_s, only, want)
    n = len(stations)
    enrol_w, score_w = int(enrol_s * RATE) // HOP, int(score_s * RATE) // HOP
    fleet = _Fleet(stations, [",".join(s.machine.backgrounds) for s in stations], enrol_w, score_w)
    fitted = [e for e, _ in _enrol_all(fleet, None, False)]
    feats, _rhythm, _envs = _features(WindowFeatures(), stations, enrol_w, enrol_w + score_w)
    det = Detector(None, n_streams=n)
    scores = np.zeros((n, score_w), np.float32)
    logits = np.zeros((n, score_w), np.float32)
    for t in range(score_w):
        scores[:, t] = det.step(feats[:, t])
        logits[:, t] = det.last_logit
    onsets = np.array([np.inf if s.onset_s is None else s.onset_s - enrol_s for s in stations])
    level = np.array([s.fault_rms_db if s.fault is not None else np.nan for s in stations])
    meta = [
        {
            "family": s.machine.family,
            "backgrounds": list(s.machine.backgrounds),
            "fault": s.fault,
            "db": s.fault_rms_db,
            "ramp": s.machine.ramp,
        }
        for s in stations
    ]
    OUT.mkdir(exist_ok=True)
    np.savez(OUT / f"{seed}{tag}.npz", feats=feats, scores=scores, logits=logits, onsets=onsets,
             level=level)  # fmt: skip
    with open(OUT / f"{seed}{tag}.pkl", "wb") as f:
        pickle.dump({"fitted": fitted, "meta": meta, "stations": stations, "index": index}, f)


def load(seed: int, tag: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    d = dict(np.load(OUT / f"{seed}{tag}.npz"))
    with open(OUT / f"{seed}{tag}.pkl", "rb") as f:
        p = pickle.load(f)
    return d, p


def replay(
    d: dict[str, Any], p: dict[str, Any], rule: Rule, trace: bool = False
) -> tuple[np.ndarray, list[tuple[int, float]], dict[str, np.ndarray]]:
    feats, scores, logits = d["feats"], d["scores"], d["logits"]
    n, w = scores.shape
    names = [f"s{i:03d}" for i in range(n)]
    rules = Rules(rule)
    per = [rules.for_station(s) for s in names]
    base = Baselines(
        p["fitted"],
        [r.novelty for r in per],
        [r.rhythm for r in per],
        [r.threshold for r in per],
        [r.slow for r in per],
        [r.persist for r in per],
    )
    eng = RuleEngine(rules, names, [True] * n)  # every station enrolled
    seen = np.zeros((n, w), np.float32)
    tr: dict[str, np.ndarray] = {
        "persist": np.zeros((n, w), np.float32),
        "novel": np.zeros((n, w), bool),
    }
    stops = []
    for t in range(w):
        s = base.adjust(feats[:, t], scores[:, t], None, logits[:, t])
        novel = base.last_novel if base.novelty_clause else None
        seen[:, t] = s
        if trace:
            tr["persist"][:, t] = base.last_persist
            tr["novel"][:, t] = base.last_novel
        ends = (t + 1) * HOP / RATE
        stops += [(dd.index, dd.window_end_ts) for dd in eng.feed(s, ends, None, novel)]
    return seen, stops, tr


def summary(d: dict[str, Any], p: dict[str, Any], seen: Any, stops: Any) -> dict[str, Any]:
    res = _metrics(seen, stops, d["onsets"], d["level"], STRONG_DB)
    false = sorted({i for i, t in stops if t < d["onsets"][i]})
    caught = {i for i, t in stops if t >= d["onsets"][i]}
    missed = [i for i in range(len(d["onsets"])) if np.isfinite(d["onsets"][i]) and i not in caught]
    res["false_stations"] = false
    res["missed"] = missed
    res["by_family"] = {}
    for g, idx in _groups(p["stations"]).items():
        keep = set(idx.tolist())
        res["by_family"][g] = {
            "false": sorted(i for i in false if i in keep),
            "missed": sum(1 for i in missed if i in keep),
        }
    return res


def _parse_rule(items: list[str]) -> Rule:
    kw: dict[str, Any] = {}
    for it in items:
        k, v = it.split("=", 1)
        if k.upper().startswith("PERSIST_") or k.upper().startswith("SLOW_"):
            setattr(bl, k.upper(), float(v))
            continue
        kw[k] = float(v) if "." in v else int(v)
    return Rule(**kw)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["dump", "replay"])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--stations", type=int, default=50)
    ap.add_argument("--rule", nargs="*", default=[])
    ap.add_argument("--detail", action="store_true")
    ap.add_argument("--only", default=None, help="station indices, comma-separated")
    ap.add_argument("--want", default=None, help="words of family/backgrounds/healthy")
    ap.add_argument("--tag", default="")
    a = ap.parse_args(argv)
    if a.cmd == "dump":
        only = None if a.only is None else {int(x) for x in a.only.split(",")}
        dump(a.seed, a.stations, only=only, want=a.want, tag=a.tag)
        return
    d, p = load(a.seed, a.tag)
    seen, stops, _ = replay(d, p, _parse_rule(a.rule))
    res = summary(d, p, seen, stops)
    if not a.detail:
        res.pop("by_family")
    json.dump(res, sys.stdout)
    print()


if __name__ == "__main__":
    main()
