"""Replay delegation policies offline: the shipped judge and a semantic scope model's
readings of every delegable prefix of some ask sets, combined by the engine's rule
(docs/architecture.md, Session 21).

    .venv/bin/python scripts/scope_policy_replay.py rows --asks A.jsonl … --out rows.json
    .venv/bin/python scripts/scope_policy_replay.py read --rows rows.json --scope DIR --out r.json
    .venv/bin/python scripts/scope_policy_replay.py grid --rows rows.json --read r.json \
        --pick eval11 --pick eval12
    .venv/bin/python scripts/scope_policy_replay.py cv --rows rows.json --read r.json \
        [--inputs small|all]
    .venv/bin/python scripts/scope_policy_replay.py fuse --rows rows.json --read r.json \
        --pick eval11 --pick eval12 --pick eval17 --pick eval24 --pick eval26 [--write]

``rows`` runs a judge-less engine over the asks (``abstention.gather`` without the
semantic check); ``read`` adds one scope model's reading of each answered prefix (DIR: a
domain directory holding ``scope-e5.npz``, and its adapter for a tuned one); ``grid``
replays, for each typing bar and pause bar of the scope (and each judge point), the share
of complex asks delegated and of simple asks kept fast, per set, with the engine's rule:

- a prefix is delegated when nothing fast answered and a cloud job started, or the
  judge's ``p_right`` is under its threshold (typed / at the pause), or the n-gram scope
  reading reaches the judge's bar, or the semantic reading reaches the scope's bar (typed
  / pause) while the judge is not surer (``SemanticVeto``: at the pause the judge must
  also reach the overrule, 0.99);
- an ask is delegated when any of its prefixes is.

``fuse`` (session 28) fits one model at the pause in place of their two bars, and stores it
as the judge's semantic part: over the judge's logit, the semantic check's and the language
(``--inputs small``), or since session 31 over every input of the judge, the n-gram scope's
logits and the semantic check's (``--inputs all``, the default). ``cv`` (session 31) leaves
each played set out in turn: fit and pick on the others, replay the one left out.

The bars are picked on the ``--pick`` sets (the highest lower share of the two, among
points that delegate at least ``--min-complex`` of their complex asks) and reported on
every set.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

N_JUDGE = 19  # a format-1 judge's inputs: the probe's first 19
_OFF = 1.01  # a scope bar no reading reaches


def cmd_rows(args: argparse.Namespace) -> None:
    from rtgate.apps.autocomplete.abstention import gather

    out: dict[str, Any] = {}
    for name, (asks, rows) in gather(args.asks, semantic=False).items():
        out[name] = {
            "asks": [{"text": a.text, "kind": a.kind, "lang": a.lang} for a in asks],
            "rows": [asdict(r) for r in rows],
        }
        print(f"{name}: {len(asks)} asks, {len(rows)} rows", flush=True)
    args.out.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")


def cmd_read(args: argparse.Namespace) -> None:
    from rtgate.apps.autocomplete.abstention import Row, read_semantic
    from rtgate.domains.loader import load_semantic_scope
    from rtgate.models.embeddings import Embedder

    scope = load_semantic_scope(args.scope, embedder=Embedder(cache_size=0))
    assert scope is not None, f"{args.scope}: no scope-e5.npz"
    data = json.loads(args.rows.read_text(encoding="utf-8"))
    out: dict[str, Any] = {"bars": [scope.bar, scope.pause_bar], "meta": scope.meta, "sets": {}}
    for name, d in data.items():
        rows = [Row(**r) for r in d["rows"]]
        read_semantic(scope, rows)
        out["sets"][name] = {r.prefix: r.semantic for r in rows if r.semantic is not None}
        print(f"{name}: {len(out['sets'][name])} prefixes read", flush=True)
    args.out.write_text(json.dumps(out, ensure_ascii=False, default=str), encoding="utf-8")


def _logistic(coef: list[float], b: float, x: list[float]) -> float:
    z = b + sum(w * v for w, v in zip(coef, x[: len(coef)], strict=True))
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


class SetView:
    """Per set, per row: what the judge and the scope said, as arrays."""

    def __init__(self, d: dict[str, Any], read: dict[str, float], judge: dict[str, Any]) -> None:
        asks, rows = d["asks"], d["rows"]
        self.simple = np.asarray([a["kind"] == "simple" for a in asks])
        self.lang = np.asarray([a["lang"] for a in asks])
        self.n = len(asks)
        self.ask = np.asarray([r["ask"] for r in rows])
        self.pause = np.asarray([bool(r["pause"]) for r in rows])
        self.anyway = np.asarray([bool(r["delegated_anyway"]) for r in rows])
        answered = [r["x"] is not None for r in rows]
        self.answered = np.asarray(answered)
        coef, b = judge["coef"], judge["intercept"]
        self.p = np.asarray([_logistic(coef, b, r["x"]) if r["x"] else 1.0 for r in rows])
        self.multi = np.asarray([r["x"][3] if r["x"] else 0.0 for r in rows])
        self.ood = np.asarray([r["x"][4] if r["x"] else 0.0 for r in rows])
        self.sem = np.asarray([read.get(r["prefix"], 0.0) if r["x"] else 0.0 for r in rows])

    def went(
        self,
        t: tuple[float, float],
        bars: tuple[float, float],
        judge_bars: dict[str, float],
        overrule: float = 0.99,
        judge_on: bool = True,
    ) -> np.ndarray[Any, Any]:
        thr = np.where(self.pause, t[1], t[0])
        low = (self.p < thr) if judge_on else np.zeros_like(self.pause)
        veto = (self.multi >= judge_bars.get("multi", math.inf)) | (
            self.ood >= judge_bars.get("ood", math.inf)
        )
        bar = np.where(self.pause, bars[1], bars[0])
        floor = np.where(self.pause, overrule, 0.0)
        stands = self.p >= np.maximum(floor, self.sem)
        sem = (self.sem >= bar) & ~(stands & ~veto & ~low)
        row = self.anyway | (self.answered & (low | veto | sem))
        out = np.zeros(self.n, dtype=bool)
        np.logical_or.at(out, self.ask, row)
        return out

    def shares(self, went: np.ndarray[Any, Any], lang: str | None = None) -> tuple[float, float]:
        m = np.ones(self.n, dtype=bool) if lang is None else self.lang == lang
        s, c = self.simple & m, ~self.simple & m
        return float(went[c].mean()) if c.any() else math.nan, float(
            (~went[s]).mean()
        ) if s.any() else math.nan

    def per_lang(self, went: np.ndarray[Any, Any]) -> str:
        """Complex delegated / simple kept fast, per language of the set."""
        shares = {
            lang: self.shares(went, lang) for lang in ("zh", "en") if (self.lang == lang).any()
        }
        return "  ".join(f"{lang} {c:.1%}/{s:.1%}" for lang, (c, s) in shares.items())


def cmd_grid(args: argparse.Namespace) -> None:
    from rtgate.domains.loader import judge_path

    judge = json.loads(judge_path().read_text(encoding="utf-8"))
    data = json.loads(args.rows.read_text(encoding="utf-8"))
    read = json.loads(args.read.read_text(encoding="utf-8"))
    views = {n: SetView(d, read["sets"][n], judge) for n, d in data.items()}
    jbars = judge.get("scope_bars", {})
    shipped_t = (judge["threshold"], judge.get("pause_threshold") or judge["threshold"])
    points: list[tuple[tuple[float, float], tuple[float, float], bool]] = []
    grid = [round(x, 3) for x in np.arange(0.05, 1.0, 0.025)] + [0.99, 0.995, 1.01]
    ts = [0.02, 0.05, 0.1, 0.2, 0.3, 0.4, shipped_t[0], shipped_t[1]]
    judge_points = [((a, b), True) for a in ts for b in ts] + [((0.0, 0.0), False)]
    for typing in [1.01, 0.995, 0.98]:
        for pause in grid:
            for t, on in judge_points:
                points.append((t, (typing, pause), on))
    pick = [n for n in views if any(p in n for p in args.pick)]

    def pooled(
        names: list[str], t: tuple[float, float], bars: tuple[float, float], on: bool
    ) -> tuple[float, float]:
        cs, ss = [], []
        for n in names:
            v = views[n]
            w = v.went(t, bars, jbars, judge_on=on)
            cs += list(w[~v.simple])
            ss += list(~w[v.simple])
        return float(np.mean(cs)), float(np.mean(ss))

    scored = []
    for t, bars, on in points:
        c, s = pooled(pick, t, bars, on)
        scored.append((min(c, s) if c >= args.min_complex else -1 + c, c, s, t, bars, on))
    scored.sort(key=lambda z: z[0], reverse=True)
    print(f"picked on {pick}:")
    for sc in scored[: args.top]:
        _, c, s, t, bars, on = sc
        print(
            f"  judge {t if on else 'off'} scope bars {bars}: complex {c:.1%} simple fast {s:.1%}"
        )
    best = scored[0]
    shown = [
        ("shipped judge, scope at its bars", shipped_t, tuple(read["bars"]), True),
        ("picked", best[3], best[4], best[5]),
    ]
    shown += [
        (f"extra {e}", shipped_t, tuple(float(v) for v in e.split("/")), True) for e in args.bars
    ]
    for e in args.point:  # judge typed/pause thresholds (or "off"), then the two bars
        j, bars_ = e.split(":")
        on = j != "off"
        typed, pause = (float(v) for v in j.split("/")) if on else (0.0, 0.0)
        b0, b1 = (float(v) for v in bars_.split("/"))
        shown.append((f"point {e}", (typed, pause), (b0, b1), on))
    for label, t, bars, on in shown:
        print(f"\n{label}: judge {t if on else 'off'}, scope bars {bars}")
        for n, v in views.items():
            w = v.went(t, bars, jbars, judge_on=on)
            c, s = v.shares(w)
            print(f"  {n:28s} complex {c:.1%}  simple fast {s:.1%}   ({v.per_lang(w)})")


N_ALL = 21  # a row's inputs: the judge's 19 and the scope readings as logits (SCOPE_LOGITS)


def _fused_inputs(
    v: SetView, coef: list[float], b: float, rows: list[dict[str, Any]], inputs: str
) -> Any:
    """Per row, the fused model's inputs. ``small`` (session 28): the judge's logit, the
    semantic check's logit, English. ``all`` (session 31): the judge's 19 inputs, the two
    scope logits and the semantic check's logit, each weighed on its own."""
    sem = np.clip(v.sem, 1e-4, 1 - 1e-4)
    semantic = np.log(sem / (1 - sem))
    if inputs == "all":
        x = np.asarray([r["x"][:N_ALL] if r["x"] else [0.0] * N_ALL for r in rows], dtype=float)
        return np.concatenate([x, semantic[:, None]], 1)
    z = np.asarray([b + sum(w * x for w, x in zip(coef[:N_JUDGE], r["x"][:N_JUDGE], strict=True))
                    if r["x"] else 30.0 for r in rows])  # fmt: skip
    en = np.asarray([1.0 - r["x"][N_JUDGE - 1] if r["x"] else 0.0 for r in rows])
    return np.stack([z, semantic, en], 1)


class Fused:
    """A logistic model of P(complex) at the pause, fitted on standardised inputs (so the
    penalty treats every input alike) and kept in the inputs' own units."""

    def __init__(self, f: Any, y: Any, c: float = 1.0) -> None:
        from sklearn.linear_model import LogisticRegression

        mu, sd = f.mean(0), f.std(0) + 1e-9
        m = LogisticRegression(C=c, max_iter=5000).fit((f - mu) / sd, y)
        self.w = m.coef_[0] / sd
        self.b = float(m.intercept_[0] - np.sum(m.coef_[0] * mu / sd))

    def p(self, f: Any) -> Any:
        return 1.0 / (1.0 + np.exp(-np.clip(f @ self.w + self.b, -60.0, 60.0)))


class FuseSets:
    """The pause rows of some sets, the fused model's inputs, and the engine's rule."""

    def __init__(self, args: argparse.Namespace, judge: dict[str, Any]) -> None:
        coef, b = [float(w) for w in judge["coef"]][:N_JUDGE], float(judge["intercept"])
        self.typed_t = float(judge["threshold"])
        self.jbars = judge.get("scope_bars", {})
        data = json.loads(args.rows.read_text(encoding="utf-8"))
        read = json.loads(args.read.read_text(encoding="utf-8"))
        self.views: dict[str, tuple[SetView, Any]] = {}
        for n, d in data.items():
            v = SetView(d, read["sets"][n], judge)
            v.anyway = v.anyway & v.pause  # a typed prefix nobody reads waits (NotYet)
            self.views[n] = (v, _fused_inputs(v, coef, b, d["rows"], args.inputs))

    def fit(self, names: list[str], c: float) -> Fused:
        xs, ys = [], []
        for n in names:
            v, f = self.views[n]
            m = v.pause & v.answered
            xs.append(f[m])
            ys.append(~v.simple[v.ask[m]])
        return Fused(np.concatenate(xs), np.concatenate(ys), c)

    def went(self, n: str, model: Fused, bar: float) -> np.ndarray[Any, Any]:
        # the engine's rule with the judge at its typed threshold everywhere and the scope's
        # bars off, or the fused model at a pause row
        v, f = self.views[n]
        out = v.went((self.typed_t, self.typed_t), (_OFF, _OFF), self.jbars)
        m = v.pause & v.answered
        s = np.zeros(len(v.p))
        s[m] = model.p(f[m])
        np.logical_or.at(out, v.ask, m & (s >= bar))
        return out

    def counts(self, names: list[str], model: Fused, bar: float) -> tuple[int, int, int, int]:
        """Complex asks delegated, complex asks, simple asks kept fast, simple asks."""
        c = cn = s = sn = 0
        for n in names:
            v = self.views[n][0]
            w = self.went(n, model, bar)
            c, cn = c + int(w[~v.simple].sum()), cn + int((~v.simple).sum())
            s, sn = s + int((~w[v.simple]).sum()), sn + int(v.simple.sum())
        return c, cn, s, sn

    def pick(self, names: list[str], model: Fused, min_complex: float) -> tuple[float, ...]:
        """The bar keeping the most simple asks fast among those delegating at least
        ``min_complex`` of the complex asks of ``names``."""
        best: tuple[float, float, float] | None = None
        for bar in np.arange(0.02, 0.9, 0.005):
            c, cn, s, sn = self.counts(names, model, float(bar))
            if c / cn >= min_complex and (best is None or s / sn > best[2]):
                best = (round(float(bar), 3), c / cn, s / sn)
        assert best is not None, "no bar delegates --min-complex of the picking sets' complex asks"
        return best


def _group(name: str) -> str:
    """The played set a file belongs to: ``asks-eval24-zh.jsonl`` -> ``eval24``."""
    return name.removeprefix("asks-").removesuffix(".jsonl").split("-")[0]


def cmd_cv(args: argparse.Namespace) -> None:
    """Leave one played set out: fit and pick on the others, replay the one left out; the
    pooled figures are what a blind set may expect of the recipe (session 31)."""
    from rtgate.domains.loader import judge_path

    sets = FuseSets(args, json.loads(judge_path().read_text(encoding="utf-8")))
    groups = sorted({_group(n) for n in sets.views})
    total = np.zeros(4, dtype=int)
    for g in groups:
        fit = [n for n in sets.views if _group(n) != g]
        model = sets.fit(fit, args.c)
        bar = sets.pick(fit, model, args.min_complex)[0]
        got = sets.counts([n for n in sets.views if _group(n) == g], model, bar)
        total += got
        print(f"  {g:8s} bar {bar:.3f}: complex {got[0]}/{got[1]}  simple fast {got[2]}/{got[3]}")
    c, cn, s, sn = (int(t) for t in total)
    print(
        f"left out, pooled ({args.inputs}): complex {c}/{cn} ({c / cn:.1%})  "
        f"simple fast {s}/{sn} ({s / sn:.1%})"
    )


def cmd_fuse(args: argparse.Namespace) -> None:
    """At the pause, one logistic model of P(complex) in place of the two bars (the OR
    rule), fitted on the pause rows of the ``--pick`` sets: over the judge's logit, the
    semantic check's logit and English (``--inputs small``, session 28), or over every input
    of the judge, the scope logits and the semantic logit (``--inputs all``, session 31). A
    typed prefix delegates as before (the judge's typed threshold, the n-gram scope bar, a
    decline of the whole ask at the pause). The point: the lowest P(complex) bar that
    delegates ``--min-complex`` of the picking sets' complex asks at the highest share of
    simple asks kept fast. ``--write`` stores it as the judge's semantic part (judge.json,
    format 2): ``p_right = 1 - P(complex)``, the part's pause threshold ``1 - bar``, typed 0
    (a typed prefix is not judged with it), and the plain judge's pause threshold set to its
    typed one (it no longer decides alone); with ``--inputs all`` the judge reads the scope
    logits too (the plain judge weighs them 0)."""
    from rtgate.domains.loader import judge_path
    from rtgate.tiers.answerability import SCOPE_LOGITS

    path = judge_path()
    judge = json.loads(path.read_text(encoding="utf-8"))
    sets = FuseSets(args, judge)
    pick = [n for n in sets.views if any(p in n for p in args.pick)]
    model = sets.fit(pick, args.c)
    best = sets.pick(pick, model, args.min_complex)
    terms = " ".join(f"{w:+.4f}·x{i}" for i, w in enumerate(model.w))
    print(f"P(complex) = sigmoid({model.b:.4f} {terms})")
    print(f"picked on {pick}: bar {best[0]}: complex {best[1]:.1%} simple fast {best[2]:.1%}")
    for n, (v, _) in sets.views.items():
        w = sets.went(n, model, best[0])
        print(f"  {n:28s} {v.per_lang(w)}")
    if not args.write:
        return
    coef, b = [float(w) for w in judge["coef"]], float(judge["intercept"])
    names = judge["features"]
    assert names[N_JUDGE - 1] == "zh" and len(names) in (N_JUDGE, N_ALL), names
    if args.inputs == "all":
        # p_right = 1 - P(complex) = sigmoid(-(b_f + w·[x, scope logits, semantic]))
        judge["features"] = [*names[:N_JUDGE], *SCOPE_LOGITS]
        judge["coef"] = [*coef[:N_JUDGE], 0.0, 0.0]
        part = [-float(w) for w in model.w]
        intercept = -model.b
        inputs = [*judge["features"], "semantic_logit"]
    else:
        assert len(names) == N_JUDGE, "--inputs small reads a 19-input judge"
        # p_right = sigmoid(-(b_f + w_z (b + coef.x) + w_s L + w_en (1 - zh)))
        w_z, w_s, w_en = (float(x) for x in model.w)
        part = [-w_z * c for c in coef]
        part[N_JUDGE - 1] += w_en  # the judge's last input is "zh"
        part.append(-w_s)
        intercept = -(model.b + w_z * b + w_en)
        inputs = ["judge_logit", "semantic_logit", "en"]
    picked = f"fused at the pause on {', '.join(args.pick)} (>= {args.min_complex:.0%} complex)"
    judge["format"] = "rtgate.judge/2"
    judge["pause_threshold"] = float(judge["threshold"])
    judge["meta"]["pause_threshold"] = float(judge["threshold"])
    judge["semantic"] = {
        "coef": [round(c, 6) for c in part],
        "intercept": round(intercept, 6),
        "threshold": 0.0,
        "pause_threshold": round(1.0 - best[0], 4),
    }
    judge["meta"]["semantic_part"] = {
        "inputs": inputs,
        "coef": [round(float(w), 6) for w in model.w],
        "intercept": round(model.b, 6),
        "bar": best[0],
        "picked": picked,
        "complex": round(best[1], 4),
        "simple_fast": round(best[2], 4),
    }
    path.write_text(json.dumps(judge, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {path.name}: {picked}")


def cmd_set(args: argparse.Namespace) -> None:
    """Write an operating point into the shipped files: the judge's typed and pause
    thresholds (judge.json) and the semantic scope's typing and pause bars (scope-e5.npz),
    each with where it was picked."""
    from rtgate.domains.loader import judge_path, load_semantic_scope, semantic_scope_path

    t = [float(v) for v in args.judge.split("/")]
    bars = [float(v) for v in args.bars.split("/")]
    point = {"judge_thresholds": t, "scope_bars": bars, "picked": args.why}
    path = judge_path()
    judge = json.loads(path.read_text(encoding="utf-8"))
    judge["threshold"], judge["pause_threshold"] = t
    judge["meta"]["threshold"], judge["meta"]["pause_threshold"] = t
    judge["meta"]["operating_point"] = point
    path.write_text(json.dumps(judge, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    scope = load_semantic_scope()
    assert scope is not None
    scope.bar, scope.pause_bar = bars
    scope.meta["operating_point"] = point
    scope.save(semantic_scope_path())
    print(f"wrote {path.name} and {semantic_scope_path().name}: {point}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rows")
    r.add_argument("--asks", type=Path, action="append", required=True)
    r.add_argument("--out", type=Path, required=True)
    rd = sub.add_parser("read")
    rd.add_argument("--rows", type=Path, required=True)
    rd.add_argument("--scope", type=Path, required=True)
    rd.add_argument("--out", type=Path, required=True)
    g = sub.add_parser("grid")
    g.add_argument("--rows", type=Path, required=True)
    g.add_argument("--read", type=Path, required=True)
    g.add_argument("--pick", action="append", default=[])
    g.add_argument("--min-complex", type=float, default=0.9)
    g.add_argument("--top", type=int, default=12)
    g.add_argument("--bars", action="append", default=[], help="typing/pause, e.g. 1.01/0.5")
    g.add_argument(
        "--point",
        action="append",
        default=[],
        help="judge thresholds and bars, e.g. 0.2/0.3:1.01/0.5 or off:1.01/0.5",
    )
    fu = sub.add_parser("fuse")
    fu.add_argument("--rows", type=Path, required=True)
    fu.add_argument("--read", type=Path, required=True)
    fu.add_argument("--pick", action="append", default=[])
    fu.add_argument("--min-complex", type=float, default=0.95)
    fu.add_argument("--write", action="store_true", help="store the point in judge.json")
    cv = sub.add_parser("cv")
    cv.add_argument("--rows", type=Path, required=True)
    cv.add_argument("--read", type=Path, required=True)
    cv.add_argument("--min-complex", type=float, default=0.95)
    for q in (fu, cv):
        q.add_argument("--inputs", choices=("small", "all"), default="all")
        q.add_argument("--c", type=float, default=1.0, help="the fit's inverse penalty")
    st = sub.add_parser("set")
    st.add_argument("--judge", required=True, help="typed/pause thresholds, e.g. 0.02/0.53")
    st.add_argument("--bars", required=True, help="typing/pause bars, e.g. 1.01/0.625")
    st.add_argument("--why", required=True, help="where the point was picked")
    args = ap.parse_args()
    cmds = {
        "rows": cmd_rows,
        "read": cmd_read,
        "grid": cmd_grid,
        "fuse": cmd_fuse,
        "cv": cmd_cv,
        "set": cmd_set,
    }
    cmds[args.cmd](args)


if __name__ == "__main__":
    main()
