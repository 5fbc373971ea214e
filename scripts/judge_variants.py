"""Replay variants of the single judge on gathered rows (docs/architecture.md, "Can the
fast path answer this?", session 11). Not part of the package: a record of what was tried.

    python scripts/judge_variants.py gather ROWS.pkl [--no-local-declines]
    python scripts/judge_variants.py compare ROWS.pkl

``gather`` reads tune, train2, val, val2 and val3 through the engine once
(:func:`rtgate.apps.autocomplete.abstention.gather`, ~8 min on two busy cores);
``compare`` fits each variant on tune + train2 (or tune alone), picks its thresholds out
of fold, and replays it on the validation sets beside the shipped format-1 judge with its
semantic veto (bars, overrule), which replays the bench's figures to the ask on val and
val3.
"""

from __future__ import annotations

import itertools
import math
import pickle
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from judge_train_asks import replay  # scripts/ is on the path when run as a script
from sklearn.linear_model import LogisticRegression

from rtgate.apps.autocomplete.abstention import (
    ASK_SETS,
    MODES,
    Row,
    _asks_shares,
    _lowest,
    _went,
    gather,
    pick_thresholds,
)
from rtgate.domains.loader import Ask, load_judge, load_semantic_scope
from rtgate.tiers.answerability import expected_calibration_error

Probs = dict[str, dict[int, float]]
Model = Callable[[Sequence[Row]], Probs]
VALIDATION = ("val", "val2", "val3")
_OFF = math.inf
SEM_BARS = (0.8, 0.85, 0.9, 0.93, 0.95, 0.97, 0.98, 0.99, 0.995, _OFF)


def _logit(p: float) -> float:
    p = min(1.0 - 1e-4, max(1e-4, p))
    return math.log(p / (1.0 - p))


def _fit(x: Sequence[Sequence[float]], y: Sequence[int], c: float) -> Callable[[Any], Any]:
    a = np.asarray(x, dtype=np.float64)
    mu, sd = a.mean(axis=0), a.std(axis=0)
    sd[sd == 0] = 1.0
    model = LogisticRegression(C=c, max_iter=5000).fit((a - mu) / sd, list(y))
    return lambda z: model.decision_function((np.asarray(z, dtype=np.float64) - mu) / sd)


def _two_parts(rows: Sequence[Row], idx: Sequence[int], c: float, stack: bool) -> Model:
    """The judge's two weight sets on rows ``idx``: its inputs; its inputs and the semantic
    reading (``stack``: the first part's score and the reading only)."""
    lab = [i for i in idx if rows[i].label is not None and rows[i].x is not None]
    plain = _fit([rows[i].x or [] for i in lab], [rows[i].label or 0 for i in lab], c)
    lab2 = [i for i in lab if rows[i].semantic is not None]
    z = plain([rows[i].x for i in lab2])

    def sem_x(r: Row, zz: float) -> list[float]:
        s = _logit(r.semantic if r.semantic is not None else 0.5)
        return [zz, s] if stack else [*(r.x or []), s]

    sem = _fit([sem_x(rows[i], zz) for i, zz in zip(lab2, z, strict=True)],
               [rows[i].label or 0 for i in lab2], c)  # fmt: skip

    def probs(rs: Sequence[Row]) -> Probs:
        ans = [i for i, r in enumerate(rs) if r.x is not None]
        zs = dict(zip(ans, plain([rs[i].x for i in ans]) if ans else [], strict=True))
        withs = [i for i in ans if rs[i].semantic is not None]
        z2 = sem([sem_x(rs[i], zs[i]) for i in withs]) if withs else []
        p1 = {i: 1.0 / (1.0 + math.exp(-v)) for i, v in zs.items()}
        p2 = {i: 1.0 / (1.0 + math.exp(-v)) for i, v in zip(withs, z2, strict=True)}
        return {"typed": p1, "pause": p1, "typed_semantic": p2, "pause_semantic": p2}

    return probs


def _model(rows: Sequence[Row], idx: Sequence[int], c: float, stack: bool, split: bool) -> Model:
    """One judge (two weight sets), or (``split``) one for typed prefixes and one for the
    whole ask at the pause."""
    if not split:
        return _two_parts(rows, idx, c, stack)
    typed = _two_parts(rows, [i for i in idx if not rows[i].pause], c, stack)
    paused = _two_parts(rows, [i for i in idx if rows[i].pause], c, stack)

    def probs(rs: Sequence[Row]) -> Probs:
        a, b = typed(rs), paused(rs)
        return {"typed": a["typed"], "typed_semantic": a["typed_semantic"],
                "pause": b["pause"], "pause_semantic": b["pause_semantic"]}  # fmt: skip

    return probs


def _pool(g: Mapping[str, tuple[list[Ask], list[Row]]], names: Sequence[str]) -> tuple[
    list[Ask], list[Row], list[str]
]:  # fmt: skip
    asks: list[Ask] = []
    rows: list[Row] = []
    of: list[str] = []
    for n in names:
        a, r = g[n]
        base = len(asks)
        asks += a
        of += [n] * len(a)
        rows += [Row(base + w.ask, w.prefix, w.kind, w.lang, w.x, w.label, w.delegated_anyway,
                     w.pause, w.semantic) for w in r]  # fmt: skip
    return asks, rows, of


def _shares(went: Any, asks: Sequence[Ask]) -> str:
    simple = np.asarray([a.kind == "simple" for a in asks])
    en = np.asarray([a.lang == "en" for a in asks])
    o, e = _asks_shares(went, simple), _asks_shares(went[en], simple[en])
    return (f"{o['complex_delegated']:.3f} / {o['simple_fast']:.3f} "
            f"(en {e['complex_delegated']:.3f} / {e['simple_fast']:.3f})")  # fmt: skip


def variant(
    g: Mapping[str, tuple[list[Ask], list[Row]]],
    fit_on: Sequence[str],
    pick_on: Sequence[str],
    *,
    min_fast: float = 0.96,
    c: float = 1.0,
    stack: bool = False,
    split: bool = False,
    sem_bars: Sequence[float] = (_OFF,),
) -> None:
    asks, rows, of = _pool(g, fit_on)
    oof: Probs = {m: {} for m in MODES}
    for fold in range(5):
        model = _model(rows, [i for i, r in enumerate(rows) if r.ask % 5 != fold], c, stack, split)
        held = [i for i, r in enumerate(rows) if r.ask % 5 == fold]
        got = model([rows[i] for i in held])
        for m in MODES:
            oof[m].update({held[k]: v for k, v in got[m].items()})
    low, anyway = _lowest(len(asks), rows, oof)
    simple = np.asarray([a.kind == "simple" for a in asks])
    mask = np.asarray([n in pick_on for n in of])
    best: tuple[tuple[float, float], list[float], dict[str, float], tuple[float, float]] | None
    best = None
    for bars in itertools.product(sem_bars, sem_bars):
        vetoed = _semantic_vetoes(rows, len(asks), bars)[mask]
        t, shares = pick_thresholds(low[mask], anyway[mask], simple[mask], min_fast=min_fast,
                                    vetoed=vetoed)  # fmt: skip
        key = (shares["complex_delegated"], shares["simple_fast"])
        if best is None or key > best[0]:
            best = (key, t, shares, bars)
    assert best is not None
    _, t, shares, bars = best
    lab = [i for i in oof["typed"] if rows[i].label is not None]
    lab2 = [i for i in oof["typed_semantic"] if rows[i].label is not None]
    ece = [expected_calibration_error([oof[m][i] for i in ix], [rows[i].label or 0 for i in ix])
           for m, ix in (("typed", lab), ("typed_semantic", lab2))]  # fmt: skip
    name = f"{'+'.join(fit_on)} pick {'+'.join(pick_on)} {min_fast} c {c}"
    name += f"{' stack' if stack else ''}{' split' if split else ''}"
    name += " + semantic bars" if len(sem_bars) > 1 else ""
    print(f"{name}: thresholds {t}; out of fold {shares}, ECE {ece[0]:.3f} / {ece[1]:.3f}")
    if bars != (_OFF, _OFF):
        print(f"    semantic bars (typed, pause) {bars}")
    final = _model(rows, range(len(rows)), c, stack, split)
    for n in VALIDATION:
        a, r = g[n]
        lo, an = _lowest(len(a), r, final(r))
        went = _went(lo, an, t, _semantic_vetoes(r, len(a), bars))
        print(f"    {n}: {_shares(went, a)}")


def _semantic_vetoes(rows: Sequence[Row], n: int, bars: tuple[float, float]) -> Any:
    """Per ask, whether the semantic reading of one of its prefixes reaches a bar (typed,
    pause): the remaining bars, chosen out of fold with the thresholds."""
    out = np.zeros(n, dtype=bool)
    for r in rows:
        if r.semantic is not None and r.semantic >= bars[1 if r.pause else 0]:
            out[r.ask] = True
    return out


def chosen_on_validation(
    g: Mapping[str, tuple[list[Ask], list[Row]]], fit_on: Sequence[str], *, split: bool = False
) -> None:
    """Weights fitted on ``fit_on``; the four thresholds (steps of 0.05) and the two
    semantic bars chosen on the validation sets themselves: the most simple asks kept
    fast over the three, every set's complex asks >= 95% delegated, then val3's English
    simple asks kept fast. In sample on the validation sets: optimistic."""
    _, rows, _ = _pool(g, fit_on)
    final = _model(rows, range(len(rows)), 1.0, False, split)
    data = {}
    for n in VALIDATION:
        a, r = g[n]
        lo, an = _lowest(len(a), r, final(r))
        data[n] = (a, r, lo, an, np.asarray([x.kind == "simple" for x in a]),
                   np.asarray([x.lang == "en" for x in a]))  # fmt: skip
    grid = np.arange(20) / 20.0
    best: tuple[float, list[float], tuple[float, float]] | None = None
    for bars in itertools.product(SEM_BARS, SEM_BARS):
        base = {n: d[3] | _semantic_vetoes(d[1], len(d[0]), bars) for n, d in data.items()}
        for i, j in itertools.product(range(len(grid)), repeat=2):
            ok = np.ones((len(grid), len(grid)), dtype=bool)
            fast = np.zeros((len(grid), len(grid)))
            val3_en = np.zeros((len(grid), len(grid)))
            for n, (_, _, lo, _, simple, en) in data.items():
                typed = base[n] | (lo[:, 0] < grid[i]) | (lo[:, 1] < grid[j])
                went = (typed[None, None, :] | (lo[:, 2][None, None, :] < grid[:, None, None])
                        | (lo[:, 3][None, None, :] < grid[None, :, None]))  # fmt: skip
                ok &= (went & ~simple).sum(-1) / (~simple).sum() >= 0.95
                fast += (~went & simple).sum(-1)
                if n == "val3":
                    val3_en = (~went & simple & en).sum(-1) / (simple & en).sum()
            score = np.where(ok, fast * 1000.0 + val3_en, -1.0)
            c, d = np.unravel_index(int(np.argmax(score)), score.shape)
            if score[c, d] >= 0 and (best is None or score[c, d] > best[0]):
                best = (float(score[c, d]), [grid[i], grid[j], grid[c], grid[d]], bars)
    if best is None:
        print(f"{'+'.join(fit_on)} chosen on validation: nothing keeps 95% complex")
        return
    _, t, bars = best
    print(f"{'+'.join(fit_on)}{' split' if split else ''} chosen on validation: thresholds "
          f"{[round(float(v), 2) for v in t]}, semantic bars {bars}")  # fmt: skip
    for n, (a, r, lo, an, _, _) in data.items():
        print(f"    {n}: {_shares(_went(lo, an, t, _semantic_vetoes(r, len(a), bars)), a)}")


def shipped(g: Mapping[str, tuple[list[Ask], list[Row]]]) -> None:
    """The shipped format-1 judge and its semantic veto, replayed."""
    judge, scope = load_judge(), load_semantic_scope()
    assert scope is not None
    print("shipped (format 1, semantic veto, overrule 0.99):")
    for n in ("tune", *VALIDATION):
        asks, rows = g[n]
        print(f"    {n}: {_shares(replay(judge, asks, rows, scope), asks)}")


def main() -> None:
    what, path = sys.argv[1], sys.argv[2]
    if what == "gather":
        local = {"complex_p": None} if "--no-local-declines" in sys.argv else {}
        names = ("tune", "train2", *VALIDATION)
        got = gather([ASK_SETS[n] for n in names], local=local)
        with open(path, "wb") as f:
            pickle.dump({n: got[ASK_SETS[n].name] for n in names}, f)
        return
    with open(path, "rb") as f:
        g = pickle.load(f)
    shipped(g)
    both, tune = ("tune", "train2"), ("tune",)
    variant(g, both, both)
    variant(g, both, tune)
    variant(g, both, tune, stack=True)
    variant(g, both, tune, split=True)
    variant(g, both, tune, split=True, min_fast=0.97)
    variant(g, both, tune, split=True, stack=True, min_fast=0.98)
    variant(g, tune, tune)
    variant(g, tune, tune, split=True)
    variant(g, both, tune, sem_bars=SEM_BARS)
    variant(g, both, tune, split=True, sem_bars=SEM_BARS)
    variant(g, tune, tune, sem_bars=SEM_BARS)
    variant(g, tune, tune, split=True, sem_bars=SEM_BARS)
    for fit_on in (both, tune):
        for split in (False, True):
            chosen_on_validation(g, fit_on, split=split)


if __name__ == "__main__":
    main()
