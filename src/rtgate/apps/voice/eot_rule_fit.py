"""Fitting the end-of-turn decision of :mod:`rtgate.apps.voice.eot_rule` on the study's rows
(#17, session 15): ``python -m rtgate.apps.voice.eot_rule_fit [--out PATH] FEATURES.json ...``
refits ``data/eot-rule.json``; :func:`simulate` replays a rule (or today's word rules) on
the rows. Apart from the rule itself so that turn-taking, which reads the rule, is not
imported back by it (the fit reads the word rules of :mod:`.turns`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.voice.eot_rule import (
    CHECK_MS,
    EotRule,
    FloatArray,
    Place,
    features,
    rule_path,
)
from rtgate.apps.voice.turns import TurnRules, cue, text_class

__all__ = ["fit", "main", "simulate", "word_rule_wait_ms"]


def _class_of(row: Mapping[str, Any]) -> str:
    heard = row.get("heard") or ""
    tc = text_class(heard if heard.strip() else None, None, TurnRules())
    return "clause" if tc in ("sure", "complete") else tc


def word_rule_wait_ms(row: Mapping[str, Any]) -> float:
    """The silence today's word rules (``TurnRules.for_model("lm+text")``) wait at this
    place: the text model's P(end) read on questions, the local model's (``p_lm``, when the
    row has it) on clauses."""
    rules = TurnRules.for_model("lm+text")
    heard = row.get("heard") or ""
    c = cue(heard) if heard.strip() else None
    p = row.get("p_text") if c == "question" else row.get("p_lm")
    return rules.wait_ms(c, p)


def _xy(rows: Iterable[Mapping[str, Any]]) -> tuple[FloatArray, FloatArray]:
    xs, ys = [], []
    for r in rows:
        text = _class_of(r)
        room = r.get("room_ms")
        for c in CHECK_MS:
            if room is not None and c >= room:
                continue
            xs.append(features(Place(text, r.get("p_text"), r["lang"], c)))
            ys.append(1.0 if r["where"] == "end" else 0.0)
    return np.asarray(xs), np.asarray(ys)


def _logistic(x: FloatArray, y: FloatArray, l2: float = 1.0, iters: int = 50) -> FloatArray:
    """Weights (intercept first) of an L2-penalised logistic regression, by Newton steps;
    the two classes weighted equally."""
    a = np.hstack([np.ones((len(x), 1)), x])
    w_cls = np.where(y > 0.5, 0.5 / max(1.0, y.sum()), 0.5 / max(1.0, (1 - y).sum())) * len(y)
    w = np.zeros(a.shape[1])
    reg = np.full(a.shape[1], l2)
    reg[0] = 0.0
    for _ in range(iters):
        p = 1.0 / (1.0 + np.exp(-(a @ w)))
        g = a.T @ (w_cls * (p - y)) + reg * w
        h = (a * (w_cls * p * (1 - p))[:, None]).T @ a + np.diag(reg) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(h, g)
        w -= step
        if float(np.abs(step).max()) < 1e-8:
            break
    return w


def simulate(rule: EotRule | None, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Pauses cut (speaking before the caller goes on) and the waits at the turns' ends, by
    ``rule`` (``None``: today's word rules), over the study's rows."""
    cut, pauses, waits = 0, 0, []
    for r in rows:
        if rule is None:
            wait = word_rule_wait_ms(r)
        else:
            wait = rule.wait_ms(_class_of(r), r.get("p_text"), r["lang"])
        if r["where"] == "pause":
            pauses += 1
            cut += wait < float(r["room_ms"])
        else:
            waits.append(wait)
    arr = np.asarray(waits) if waits else np.zeros(1)
    return {"pauses": pauses, "cut": cut, "ends": len(waits),
            "wait_p50": float(np.median(arr)), "wait_p95": float(np.percentile(arr, 95)),
            "wait_mean": float(arr.mean()),
            "ends_at_timeout": int(sum(w >= 1200.0 for w in waits))}  # fmt: skip


def fit(rows: Sequence[Mapping[str, Any]], l2: float = 1.0, max_cut: int | None = None) -> EotRule:
    """The rule fitted on ``rows``, its bar the one with the least median wait at the ends
    (then the least mean) whose pauses cut are at most ``max_cut`` (default: what today's
    word rules cut on the same rows)."""
    x, y = _xy(rows)
    w = _logistic(x, y, l2)
    limit = simulate(None, rows)["cut"] if max_cut is None else max_cut
    best: tuple[float, float, float] | None = None
    for bar in np.round(np.arange(0.30, 0.991, 0.01), 2):
        rule = EotRule(tuple(float(v) for v in w[1:]), float(w[0]), float(bar))
        s = simulate(rule, rows)
        if s["cut"] <= limit and (best is None or (s["wait_p50"], s["wait_mean"]) < best[:2]):
            best = (s["wait_p50"], s["wait_mean"], float(bar))
    bar = best[2] if best is not None else 0.99
    return EotRule(tuple(float(v) for v in w[1:]), float(w[0]), bar,
                   meta={"l2": l2, "max_cut": limit, "rows": len(rows)})  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:  # pragma: no cover - refits the file
    """``python -m rtgate.apps.voice.eot_rule_fit [--out PATH] FEATURES.json ...``: refit."""
    args = list(sys.argv[1:] if argv is None else argv)
    out = rule_path()
    if "--out" in args:
        i = args.index("--out")
        out = Path(args[i + 1])
        del args[i : i + 2]
    rows: list[dict[str, Any]] = []
    for a in args:
        rows += json.loads(Path(a).read_text(encoding="utf-8"))
    rule = fit(rows)
    sets = sorted({str(r.get("set")) for r in rows})
    rule = EotRule(rule.coef, rule.intercept, rule.bar, meta=dict(rule.meta) | {"sets": sets})
    rule.save(out)
    print(
        json.dumps({"bar": rule.bar, "today": simulate(None, rows), "rule": simulate(rule, rows)})
    )


if __name__ == "__main__":  # pragma: no cover
    main()
