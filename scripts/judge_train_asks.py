"""Replay format-1 judges fitted on the tuning and the training asks (docs/architecture.md,
"Can the fast path answer this?", session 13). Not part of the package: a record of what
was tried.

    python scripts/judge_train_asks.py gather ROWS.pkl
    python scripts/judge_train_asks.py compare ROWS.pkl

``gather`` reads tune, train2, train3 (no semantic reading: the format-1 judge does not
weigh it) and the validation sets val, val2, val3, eval6, eval7 (with it, to replay the
semantic veto) through a judge-less engine once (:func:`abstention.gather`). ``compare``
re-reads the training asks' scope out of sample (a scope classifier that did not learn
that file), fits each variant, picks its thresholds out of fold on the fitting asks, and
replays it with the shipped semantic veto and overrule on the validation sets, beside the
shipped judge.
"""

from __future__ import annotations

import pickle
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rtgate.apps.autocomplete.abstention import ASK_SETS, Row, fit_rows, gather, reread_scope
from rtgate.domains.loader import (
    SCOPE_TRAIN_ASKS,
    Ask,
    load_judge,
    load_semantic_scope,
    train_scope,
)
from rtgate.tiers.answerability import CalibratedJudge, feature_names

FIT = ("tune", "train2", "train3")
VALIDATION = ("val", "val2", "val3", "eval6", "eval7")
N_IN = len(feature_names())
Gathered = Mapping[str, tuple[list[Ask], list[Row]]]


def _pool(g: Gathered, names: Sequence[str]) -> tuple[list[Ask], list[Row], list[str]]:
    asks: list[Ask] = []
    rows: list[Row] = []
    of: list[str] = []
    for n in names:
        a, r = g[n]
        base = len(asks)
        asks += a
        of += [n] * len(a)
        rows += [Row(base + w.ask, w.prefix, w.kind, w.lang, (w.x or [])[:N_IN] or None,
                     w.label, w.delegated_anyway, w.pause, w.semantic) for w in r]  # fmt: skip
    return asks, rows, of


def replay(
    judge: CalibratedJudge, asks: Sequence[Ask], rows: Sequence[Row]
) -> np.ndarray[Any, Any]:
    """Per ask, whether the engine would send it on: the judge (threshold, pause threshold,
    scope bars) and the shipped semantic veto with its overrule (0.99 at the pause)."""
    scope = load_semantic_scope()
    assert scope is not None
    went = np.zeros(len(asks), dtype=bool)
    for r in rows:
        if r.delegated_anyway:
            went[r.ask] = True
        if r.x is None:
            continue
        x = r.x[:N_IN]
        p = judge.probability(x)
        t = judge.pause_threshold if r.pause and judge.pause_threshold else judge.threshold
        if p < t or judge.vetoes(x):
            went[r.ask] = True
        elif r.semantic is not None and scope.vetoes(r.semantic, pause=r.pause):
            went[r.ask] |= not p >= max(0.99 if r.pause else 0.0, r.semantic)
    return went


def shares(went: np.ndarray[Any, Any], asks: Sequence[Ask]) -> str:
    out = []
    for lang in ("all", "zh", "en"):
        m = np.asarray([lang in ("all", a.lang) for a in asks])
        s = np.asarray([a.kind == "simple" for a in asks])
        hard, easy = m & ~s, m & s
        c = went[hard].mean() if hard.any() else float("nan")
        f = (~went[easy]).mean() if easy.any() else float("nan")
        out.append(f"{lang} {100 * c:.1f}/{100 * f:.1f}")
    return "  ".join(out)


def variant(
    g: Gathered, fit_on: Sequence[str], pick_on: Sequence[str], *, min_fast: float = 0.96
) -> CalibratedJudge:
    sub = {ASK_SETS[n].name: (g[n][0], [Row(r.ask, r.prefix, r.kind, r.lang,
                                            (r.x or [])[:N_IN] or None, r.label,
                                            r.delegated_anyway, r.pause) for r in g[n][1]])
           for n in fit_on}  # fmt: skip
    judge, rep = fit_rows(sub, pick_on=[ASK_SETS[n].name for n in pick_on], min_fast=min_fast)
    oof = rep["out_of_fold"]
    print(f"fit {'+'.join(fit_on)} pick {'+'.join(pick_on)} min_fast {min_fast}: "
          f"t {rep['threshold']} pause {rep['pause_threshold']} bars {rep['scope_bars']}; "
          f"out of fold {oof['complex_delegated']} / {oof['simple_fast']}, per set "
          f"{oof['per_set']}, ECE {oof['ece']}")  # fmt: skip
    return judge


def report(judge: CalibratedJudge, g: Gathered, names: Sequence[str] = VALIDATION) -> None:
    total = 0.0
    for n in names:
        asks, rows = g[n]
        went = replay(judge, asks, [Row(r.ask, r.prefix, r.kind, r.lang,
                                        (r.x or [])[:N_IN] or None, r.label,
                                        r.delegated_anyway, r.pause, r.semantic)
                                    for r in rows])  # fmt: skip
        print(f"    {n:6s} {shares(went, asks)}")
        total += 0.0
    weights = dict(zip(feature_names(), np.round(judge.coef, 3).tolist(), strict=True))
    print(f"    weights {weights}")


def reread(g: dict[str, tuple[list[Ask], list[Row]]]) -> None:
    for name in FIT:
        file = ASK_SETS[name].name
        if file in SCOPE_TRAIN_ASKS:
            reread_scope(g[name][1], train_scope(leave_out=(file,)))


def main() -> None:
    what, path = sys.argv[1], sys.argv[2]
    if what == "gather":
        got = gather([ASK_SETS[n] for n in FIT], semantic=False)
        got.update(gather([ASK_SETS[n] for n in VALIDATION]))
        with open(path, "wb") as f:
            pickle.dump({n: got[ASK_SETS[n].name] for n in (*FIT, *VALIDATION)}, f)
        return
    with open(path, "rb") as f:
        g = pickle.load(f)
    shipped = load_judge()
    print("shipped (format 1, semantic veto, overrule 0.99):")
    report(shipped, g)
    variant_names = sys.argv[3:] or ["tune", "all", "all-pick-tune"]
    reread(g)
    for v in variant_names:
        if v == "tune":
            report(variant(g, ("tune",), ("tune",)), g)
        elif v == "all":
            report(variant(g, FIT, FIT), g)
        elif v == "all-pick-tune":
            report(variant(g, FIT, ("tune",)), g)
        elif v == "all-097":
            report(variant(g, FIT, FIT, min_fast=0.97), g)
        elif v == "all-095":
            report(variant(g, FIT, FIT, min_fast=0.95), g)


if __name__ == "__main__":
    main()
