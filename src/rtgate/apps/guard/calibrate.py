"""Choose a detector's operating points on the tuning set and write them into its score.

A score scale belongs to its model: the rules file's defaults (0.92 in 2 of 3 windows, or one
window at 0.995) mean "the lowest threshold without a false stop or a miss on the tuning set"
and "clearer than any healthy window of it" only once the exported score is calibrated for
that model (``train.OPERATING_POINTS``, ``train.calibrate``). This module measures them for a
trained file on the tuning set (the simulator's unseen motors, seed 3000, 480 clips of 8 s,
used for nothing else; never the outside set) and rewrites the file's calibration:

- the one-window point: the highest raw score of a healthy window, a little above it
  (logit + 0.5), so that no healthy window of the tuning set stops at once;
- the k-of-n point: the lowest raw threshold (on a grid of logits) at which the default rule,
  with that one-window clause, makes no false stop and no miss; when none does, the one with
  the fewest false stops, then misses.

``python -m rtgate.apps.guard.calibrate MODEL --out FILE`` prints what it chose.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.apps.guard.evaluate import evaluate_clips
from rtgate.apps.guard.features import HOP, RATE
from rtgate.apps.guard.rules import Rule, RuleEngine, Rules
from rtgate.apps.guard.simulate import make_set

__all__ = ["choose_points", "recalibrate"]

F64 = npt.NDArray[np.float64]


def _raw_logits(model: str | Path, scores: npt.NDArray[np.float32]) -> tuple[F64, float, float]:
    import onnx
    from onnx import numpy_helper

    proto = onnx.load(str(model))
    init = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    a, b = float(init["calibration_a"]), float(init["calibration_b"])
    s = np.clip(scores.astype(np.float64), 1e-12, 1 - 1e-12)
    return (np.log(s / (1 - s)) - b) / a, a, b


def _count(logits: F64, onsets: F64, thr: float, inst: float) -> tuple[int, int]:
    """False stops and misses of the default rule at raw logits ``thr`` / ``inst`` (run on
    sigmoid scores, so the rule engine is the one the stop path uses)."""
    p = 1 / (1 + np.exp(-logits))
    rule = Rule(threshold=float(1 / (1 + math.exp(-thr))), instant=float(1 / (1 + math.exp(-inst))))
    n, t_len = p.shape
    eng = RuleEngine(Rules(rule), [f"c{i}" for i in range(n)])
    false, caught = 0, set()
    for t in range(t_len):
        end = (t + 1) * HOP / RATE
        for d in eng.feed(p[:, t].astype(np.float32), end):
            if end < onsets[d.index]:
                false += 1
            else:
                caught.add(d.index)
    return false, int(np.isfinite(onsets).sum()) - len(caught)


def choose_points(
    model: str | Path, n_clips: int = 480, seed: int = 3000, seconds: float = 8.0
) -> dict[str, Any]:
    """The raw scores of ``model`` at the two operating points (module doc)."""
    clips = make_set(n_clips, "unseen", seed=seed, seconds=seconds)
    report = evaluate_clips(model, clips, with_scores=True)
    logits, _, _ = _raw_logits(model, report["scores"])
    onsets = np.array([c.onset_s if c.onset_s is not None else np.inf for c in clips])
    ends = (np.arange(logits.shape[1]) + 1) * HOP / RATE
    healthy = ends[None, :] < onsets[:, None]
    inst = float(logits[healthy].max()) + 0.5
    trials = []
    for thr in np.arange(-2.0, min(inst, 12.0), 0.25):
        fs, miss = _count(logits, onsets, float(thr), inst)
        trials.append((fs, miss, float(thr)))
        if fs == 0 and miss == 0:
            break
    fs, miss, thr = min(trials, key=lambda x: (x[0], x[1], -x[2])) if trials else (0, 0, inst)
    top = 1 - 1e-6  # a point the logit can still be taken of
    return {
        "tuning_set": {"population": "unseen", "clips": n_clips, "seed": seed, "seconds": seconds},
        "raw_threshold": min(round(1 / (1 + math.exp(-thr)), 6), top),
        "raw_instant": min(round(1 / (1 + math.exp(-inst)), 7), top),
        "false_stops": fs,
        "misses": miss,
    }


def recalibrate(
    model: str | Path, out: str | Path, raw_threshold: float, raw_instant: float
) -> None:
    """Write ``model`` to ``out`` with its score mapping ``raw_threshold`` to 0.92 and
    ``raw_instant`` to 0.995 (the calibration and the metadata both)."""
    import onnx
    from onnx import numpy_helper

    from rtgate.apps.guard.train import calibration

    points = ((raw_threshold, 0.92), (raw_instant, 0.995))
    a, b = calibration(points)
    proto = onnx.load(str(model))
    init = {t.name: t for t in proto.graph.initializer}
    a0, b0 = (float(numpy_helper.to_array(init[k])) for k in ("calibration_a", "calibration_b"))
    # the file holds sigmoid(a0 * raw + b0); the raw logit is the network's, so only a, b change
    for name, value in (("calibration_a", a), ("calibration_b", b)):
        init[name].CopyFrom(numpy_helper.from_array(np.array(value, np.float32), name))
    for entry in proto.metadata_props:
        if entry.key == "info":
            info = json.loads(entry.value)
            info["calibration"] = {"a": a, "b": b, "raw_to_score": points, "before": [a0, b0]}
            entry.value = json.dumps(info, sort_keys=True)
    Path(out).write_bytes(proto.SerializeToString())


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m rtgate.apps.guard.calibrate")
    ap.add_argument("model")
    ap.add_argument("--out", required=True)
    ap.add_argument("--clips", type=int, default=480)
    ap.add_argument("--seed", type=int, default=3000)
    args = ap.parse_args(argv)
    chosen = choose_points(args.model, args.clips, args.seed)
    recalibrate(args.model, args.out, chosen["raw_threshold"], chosen["raw_instant"])
    print(json.dumps(chosen, indent=1))


if __name__ == "__main__":
    main()
