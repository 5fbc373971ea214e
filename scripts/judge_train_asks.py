"""Replay format-1 judges fitted on the tuning and the training asks (docs/architecture.md,
"Can the fast path answer this?", session 13). Not part of the package: a record of what
was tried.

    python scripts/judge_train_asks.py gather ROWS.pkl
    python scripts/judge_train_asks.py compare ROWS.pkl [tune all all-pick-tune all-097 all-095]
    python scripts/judge_train_asks.py points ROWS.pkl
    python scripts/judge_train_asks.py causes ROWS.pkl
    python scripts/judge_train_asks.py structure ROWS.pkl

``gather`` reads tune, train2, train3 (no semantic reading: the format-1 judge does not
weigh it) and the validation sets val, val2, val3, eval6, eval7 (with it, to replay the
semantic veto) through a judge-less engine once (:func:`abstention.gather`). ``compare``
re-reads the training asks' scope out of sample (a scope classifier that did not learn
that file), fits each variant, picks its thresholds out of fold on the fitting asks, and
replays it with the shipped semantic veto and overrule on the validation sets, beside the
shipped judge. ``points``: the operating points the training asks allow (thresholds chosen
on tune + train2 + train3, the share of their simple asks kept fast counted among those no
fast tier left to the cloud anyway), replayed on validation. ``causes``: per set, the share
of simple asks each reading would send on (the judge, its scope bar, the semantic check,
no fast answer), and how many only the last sends. ``structure``: how well the judge's
inputs, and two structural signals (confident clause intents other than the whole ask's;
a joining word followed by a confident ask of another intent), tell the whole simple asks
of tune + train2 + train3 from the multi-part ones (logistic model, 5 folds by ask).
"""

from __future__ import annotations

import functools
import itertools
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rtgate.apps.autocomplete.abstention import (
    ASK_SETS,
    Row,
    fit_rows,
    gather,
    pool_rows,
    reread_scope,
)
from rtgate.domains.loader import (
    Ask,
    load_judge,
    load_semantic_scope,
    scope_ask_files,
    train_scope,
)
from rtgate.tiers.answerability import CalibratedJudge, feature_names, fit_judge
from rtgate.tiers.semantic_scope import SemanticScope

FIT = ("tune", "train2", "train3")
VALIDATION = ("val", "val2", "val3", "eval6", "eval7")
N_IN = len(feature_names())
Gathered = Mapping[str, tuple[list[Ask], list[Row]]]


def _pool(g: Gathered, names: Sequence[str]) -> tuple[list[Ask], list[Row], list[str]]:
    """The sets named, pooled, each row's inputs cut to the judge's own."""
    asks, rows, of = pool_rows({n: g[n] for n in names})
    for r in rows:
        r.x = (r.x or [])[:N_IN] or None
    return asks, rows, of


def replay(
    judge: CalibratedJudge,
    asks: Sequence[Ask],
    rows: Sequence[Row],
    scope: SemanticScope | None = None,
) -> np.ndarray[Any, Any]:
    """Per ask, whether the engine would send it on: the judge (threshold, pause threshold,
    scope bars) and the semantic veto (the shipped one unless ``scope``) with its overrule
    (0.99 at the pause). Each row's inputs are cut to the judge's own."""
    scope = scope or _shipped_scope()
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


@functools.cache
def _shipped_scope() -> SemanticScope:
    scope = load_semantic_scope()
    assert scope is not None
    return scope


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


def report(
    judge: CalibratedJudge, g: Gathered, names: Sequence[str] = VALIDATION, weights: bool = True
) -> None:
    for n in names:
        asks, rows = g[n]
        went = replay(judge, asks, rows)
        print(f"    {n:6s} {shares(went, asks)}")
    if weights:
        named = dict(zip(feature_names(), np.round(judge.coef, 3).tolist(), strict=True))
        print(f"    weights {named}")


def reread(g: dict[str, tuple[list[Ask], list[Row]]]) -> None:
    learned = {f.name for f in scope_ask_files()}  # (SCOPE_TRAIN_ASKS before session 18)
    for name in FIT:
        file = ASK_SETS[name].name
        if file in learned:
            reread_scope(g[name][1], train_scope(leave_out=(file,)))


def points(g: Gathered) -> None:
    import math

    from rtgate.apps.autocomplete.abstention import _by_ask, _folds

    asks, rows, _ = _pool(g, FIT)
    simple = np.asarray([a.kind == "simple" for a in asks])
    lab = [i for i, r in enumerate(rows) if r.label is not None and r.x is not None]
    pooled = fit_judge([rows[i].x or [] for i in lab], [rows[i].label or 0 for i in lab])
    shipped = load_judge()
    oof = _folds(rows)
    for name, (coef, b), p in (
        ("shipped weights (tune), read out of sample", (list(shipped.coef), shipped.intercept),
         None),
        ("pooled weights, thresholds on out-of-fold p", pooled, oof),
    ):  # fmt: skip
        j0 = CalibratedJudge(coef, b, 0.5)
        probs = p or {i: j0.probability(r.x) for i, r in enumerate(rows) if r.x is not None}
        anyway, typed, paused, multi, _ = _by_ask(rows, len(asks), probs)
        keep = simple & ~anyway
        for min_fast in (0.96, 0.9, 0.85):
            best = None
            for t, tp, bar in itertools.product(np.arange(0, 90) / 100, np.arange(0, 95) / 100,
                                                (0.95, 0.98, 0.99, math.inf)):  # fmt: skip
                went = anyway | (typed < t) | (paused < tp) | (multi >= bar)
                fast = float((~went[keep]).mean())
                if fast >= min_fast:
                    key = (float(went[~simple].mean()), fast)
                    if best is None or key > best[0]:
                        best = (key, float(t), float(tp), bar)
            assert best is not None
            (done, fast), t, tp, bar = best
            bars = {} if bar == math.inf else {"multi": float(bar)}
            print(f"{name}, keepable simple >= {min_fast}: t {t:.2f} pause {tp:.2f} bars "
                  f"{bars}; on the fitting asks {done:.3f} / {fast:.3f}")  # fmt: skip
            report(CalibratedJudge(coef, b, t, scope_bars=bars, pause_threshold=tp), g,
                   weights=False)  # fmt: skip


def causes(g: Gathered) -> None:
    judge, scope = load_judge(), load_semantic_scope()
    assert scope is not None
    for name in (*FIT, *VALIDATION):
        asks, rows = g[name]
        n = len(asks)
        anyway, by_judge, bar, sem = (np.zeros(n, dtype=bool) for _ in range(4))
        for r in rows:
            anyway[r.ask] |= r.delegated_anyway
            if r.x is None:
                continue
            x = r.x[:N_IN]
            p = judge.probability(x)
            t = judge.pause_threshold if r.pause and judge.pause_threshold else judge.threshold
            bar[r.ask] |= judge.vetoes(x)
            by_judge[r.ask] |= p < t
            if r.semantic is not None and scope.vetoes(r.semantic, pause=r.pause):
                sem[r.ask] |= not p >= max(0.99 if r.pause else 0.0, r.semantic)
        for lang in ("zh", "en"):
            m = np.asarray([a.kind == "simple" and a.lang == lang for a in asks])
            c = np.asarray([a.kind != "simple" and a.lang == lang for a in asks])
            if not m.any():
                continue
            only = anyway & ~(by_judge | bar | sem)
            print(
                f"{name:6s} {lang} simple {m.sum()}: judge {by_judge[m].mean():.2f}, scope "
                f"bar {bar[m].mean():.2f}, semantic {sem[m].mean():.2f}, no fast answer "
                f"{anyway[m].mean():.2f}, any {(anyway | by_judge | bar | sem)[m].mean():.2f}"
                f"; only no fast answer: simple {only[m].sum()}, complex {only[c].sum()}"
            )


def _structure_reader() -> Callable[[str], list[float]]:
    """The two structural signals of a text (see ``structure``)."""
    import re

    from rtgate.domains.loader import load_classifier
    from rtgate.tiers.complexity import _EN_JOIN, _ZH_JOIN, clauses
    from rtgate.tiers.textnorm import lang_of, normalize

    clf = load_classifier("ngram")
    join = re.compile(rf"(?:{_ZH_JOIN})|\b(?:{_EN_JOIN})\b", re.IGNORECASE)

    def size(p: str) -> int:
        return len(p.replace(" ", "")) if lang_of(p) == "zh" else len(p.split(" "))

    def signals(text: str) -> list[float]:
        whole = clf.rank(normalize(text))[0][0]
        other = set()
        for part in (normalize(c) for c in clauses(text.casefold())):
            if size(part) >= 3:
                intent, p = clf.rank(part)[0]
                if intent not in ("complex", whole) and p >= 0.95:
                    other.add(intent)
        second = 0
        for m in join.finditer(text.casefold()):
            rest = normalize(text.casefold()[m.end() :])
            if size(rest) >= 3:
                intent, p = clf.rank(rest)[0]
                second += intent not in ("complex", whole) and p >= 0.7
        return [float(np.log1p(len(other))), float(np.log1p(second))]

    return signals


def structure(g: Gathered) -> None:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.model_selection import GroupKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    signals = _structure_reader()

    x, s, y, groups, langs = [], [], [], [], []
    base = 0
    for name in FIT:
        asks, rows = g[name]
        last = {r.ask: r for r in rows if r.x is not None and r.kind != "ood"}  # longest
        for k, r in last.items():
            x.append((r.x or [])[:N_IN])
            s.append(signals(asks[k].text))
            y.append(int(r.kind == "simple"))
            groups.append(base + k)
            langs.append(r.lang)
        base += len(asks)
    xa, sa, ya, la = np.asarray(x), np.asarray(s), np.asarray(y), np.asarray(langs)
    from sklearn.ensemble import HistGradientBoostingClassifier

    for name, m, model in (
        ("inputs", xa, LogisticRegression(max_iter=5000)),
        ("inputs + structure", np.hstack([xa, sa]), LogisticRegression(max_iter=5000)),
        ("inputs, boosted trees", xa, HistGradientBoostingClassifier(max_iter=200, random_state=0)),
        ("inputs + structure, boosted trees", np.hstack([xa, sa]),
         HistGradientBoostingClassifier(max_iter=200, random_state=0)),
    ):  # fmt: skip
        p = cross_val_predict(make_pipeline(StandardScaler(), model), m, ya, groups=groups,
                              cv=GroupKFold(5), method="predict_proba")[:, 1]  # fmt: skip
        for lang in ("zh", "en"):
            k = la == lang
            bar = np.quantile(p[k & (ya == 0)], 0.95)  # delegates 95% of the multi-part asks
            print(
                f"{name} {lang}: AUC {roc_auc_score(ya[k], p[k]):.3f}, simple kept at the "
                f"bar delegating 95% of multi-part {(p[k & (ya == 1)] > bar).mean():.2f}"
            )
    for j, name in enumerate(("other clause intents", "second ask after a join")):
        for lang in ("zh", "en"):
            k = la == lang
            print(
                f"{name} {lang}: AUC {roc_auc_score(ya[k], -sa[k, j]):.2f}; > 0 in simple "
                f"{(sa[k & (ya == 1), j] > 0).mean():.2f}, multi "
                f"{(sa[k & (ya == 0), j] > 0).mean():.2f}"
            )


def trees(g: Gathered) -> None:
    """A boosted-trees judge over the judge's inputs and the structural signals, fitted on
    the prefixes of tune + train2 + train3 (labelled as for the judge), its two thresholds
    (typed, pause) chosen on out-of-fold predictions over the three sets, replayed with
    the shipped semantic veto on validation."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    signals = _structure_reader()
    seen: dict[str, list[float]] = {}

    def inputs(r: Row) -> list[float]:
        if r.prefix not in seen:
            seen[r.prefix] = signals(r.prefix)
        return [*(r.x or [])[:N_IN], *seen[r.prefix]]

    asks, rows, _ = _pool(g, FIT)
    lab = [i for i, r in enumerate(rows) if r.x is not None and r.label is not None]
    answered = [i for i, r in enumerate(rows) if r.x is not None]
    xs = {i: inputs(rows[i]) for i in answered}

    def model(idx: Sequence[int]) -> HistGradientBoostingClassifier:
        m = HistGradientBoostingClassifier(max_iter=200, random_state=0)
        return m.fit([xs[i] for i in idx], [rows[i].label or 0 for i in idx])

    oof: dict[int, float] = {}
    for fold in range(5):
        fitted = model([i for i in lab if rows[i].ask % 5 != fold])
        held = [i for i in answered if rows[i].ask % 5 == fold]
        oof.update(zip(held, fitted.predict_proba([xs[i] for i in held])[:, 1], strict=True))
    from rtgate.apps.autocomplete.abstention import _by_ask

    anyway, typed, paused, _, _ = _by_ask(rows, len(asks), oof)
    simple = np.asarray([a.kind == "simple" for a in asks])
    keep = simple & ~anyway
    final = model(lab)
    scope = load_semantic_scope()
    assert scope is not None
    for min_fast in (0.96, 0.9):
        best = None
        for t, tp in itertools.product(np.arange(0, 95) / 100, np.arange(0, 95) / 100):
            went = anyway | (typed < t) | (paused < tp)
            fast = float((~went[keep]).mean())
            if fast >= min_fast:
                key = (float(went[~simple].mean()), fast)
                if best is None or key > best[0]:
                    best = (key, float(t), float(tp))
        assert best is not None
        (done, fast), t, tp = best
        print(f"boosted trees, keepable simple >= {min_fast}: t {t:.2f} pause {tp:.2f}; on the "
              f"fitting asks out of fold {done:.3f} / {fast:.3f}")  # fmt: skip
        for n in VALIDATION:
            v_asks, v_rows = g[n]
            idx = [k for k, r in enumerate(v_rows) if r.x is not None]
            ps = dict(zip(idx, final.predict_proba([inputs(v_rows[k]) for k in idx])[:, 1],
                          strict=True))  # fmt: skip
            went = np.zeros(len(v_asks), dtype=bool)
            for k, r in enumerate(v_rows):
                went[r.ask] |= r.delegated_anyway
                if k not in ps:
                    continue
                if ps[k] < (tp if r.pause else t):
                    went[r.ask] = True
                elif r.semantic is not None and scope.vetoes(r.semantic, pause=r.pause):
                    went[r.ask] |= not ps[k] >= max(0.99 if r.pause else 0.0, r.semantic)
            print(f"    {n:6s} {shares(went, v_asks)}")


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
    if what in ("points", "structure", "trees"):
        reread(g)
        {"points": points, "structure": structure, "trees": trees}[what](g)
        return
    if what == "causes":
        causes(g)
        return
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
