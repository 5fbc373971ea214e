"""The format-1 judge refitted on more of the played ask sets, with and without its length
input, chosen on one part of the validation sets and checked on the other (#20, session 16).
Not part of the package: a record of what was tried.

    PYTHONPATH=src python scripts/judge_refit_split.py gather ROWS.pkl
    PYTHONPATH=src python scripts/judge_refit_split.py compare ROWS.pkl

``gather`` reads every set through a judge-less engine once (:func:`abstention.gather`,
with the semantic check's reading, for the replay's veto); the training asks' scope is
re-read by a classifier that did not learn them. ``compare`` fits each variant on ``FIT``
(weights on every labelled row; thresholds and scope bar on out-of-fold predictions over
the same asks, for each ``min_fast``), and replays it with the shipped semantic veto on
``FIT`` (in sample) and ``CHECK`` (never fitted or chosen on), beside the shipped judge.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from judge_train_asks import N_IN, replay, reread

from rtgate.apps.autocomplete.abstention import ASK_SETS, Row, fit_rows, gather
from rtgate.domains.loader import Ask, load_judge
from rtgate.tiers.answerability import CalibratedJudge, feature_names

FIT = ("tune", "train2", "train3", "eval", "eval2", "eval3", "eval4", "eval5", "eval7", "eval8")
CHECK = ("val", "val2", "val3", "eval6", "eval9", "eval10")
LENGTH = feature_names().index("log_units")
Gathered = dict[str, tuple[list[Ask], list[Row]]]


def _cut(rows: Sequence[Row], drop: Sequence[int] = ()) -> list[Row]:
    out = []
    for r in rows:
        x = None if r.x is None else list(r.x[:N_IN])
        if x is not None:
            for i in drop:
                x[i] = 0.0
        out.append(replace(r, x=x))
    return out


def shares(went: np.ndarray, asks: Sequence[Ask]) -> tuple[float, float]:
    s = np.asarray([a.kind == "simple" for a in asks])
    return float(went[~s].mean()), float((~went[s]).mean())


def compare(g: Gathered) -> None:
    shipped = load_judge()

    def show(name: str, judge: CalibratedJudge, drop: Sequence[int]) -> None:
        line = []
        pooled: dict[str, list[tuple[float, float, int, int]]] = {"fit": [], "check": []}
        for part, names in (("fit", FIT), ("check", CHECK)):
            for n in names:
                asks = g[n][0]
                went = replay(judge, asks, _cut(g[n][1], drop))
                c, f = shares(went, asks)
                k = sum(a.kind != "simple" for a in asks)
                pooled[part].append((c, f, k, len(asks) - k))
                if part == "check":
                    line.append(f"{n} {100 * c:.1f}/{100 * f:.1f}")
        agg = []
        for part in ("fit", "check"):
            ps = pooled[part]
            kc = sum(p[2] for p in ps)
            ks = sum(p[3] for p in ps)
            c = sum(p[0] * p[2] for p in ps) / kc
            f = sum(p[1] * p[3] for p in ps) / ks
            agg.append(f"{part} {100 * c:.1f}/{100 * f:.1f}")
        print(f"{name}: {'  '.join(agg)} | {'  '.join(line)}", flush=True)

    show("shipped", shipped, ())
    for label, drop in (("with length", ()), ("no length", (LENGTH,))):
        sub = {ASK_SETS[n].name: (g[n][0], _cut(g[n][1], drop)) for n in FIT}
        for min_fast in (0.9, 0.8, 0.7, 0.6):
            judge, rep = fit_rows(sub, min_fast=min_fast)
            oof = rep["out_of_fold"]
            show(f"{label}, min_fast {min_fast} (t {rep['threshold']}, pause "
                 f"{rep['pause_threshold']}, bars {rep['scope_bars']}; oof "
                 f"{oof['complex_delegated']}/{oof['simple_fast']})", judge, drop)  # fmt: skip
        named = dict(zip(feature_names(), np.round(judge.coef, 3).tolist(), strict=True))
        print(f"    weights {named}", flush=True)


def main() -> None:
    verb, path = sys.argv[1], sys.argv[2]
    if verb == "gather":
        g = gather([ASK_SETS[n] for n in (*FIT, *CHECK)])
        named = {n: g[ASK_SETS[n].name] for n in (*FIT, *CHECK)}
        reread(named)
        with open(path, "wb") as f:
            pickle.dump(named, f)
    else:
        with open(path, "rb") as f:
            compare(pickle.load(f))


if __name__ == "__main__":
    main()
