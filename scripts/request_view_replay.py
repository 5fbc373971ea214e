"""Replay the judge, the semantic check and the Chinese complex decline on what an ask
*asks* (:func:`~rtgate.tiers.clause_reader.request_view`) rather than on all it tells
(docs/architecture.md, "Can the fast path answer this?", session 15). Not part of the
package: a record of what was measured.

    python scripts/request_view_replay.py gather ROWS.pkl val val2 ...
    python scripts/request_view_replay.py read ROWS.pkl READ.pkl VARIANT ...
    python scripts/request_view_replay.py points READ.pkl

``gather`` types each set's asks through a judge-less engine whose local tier never
declines as complex (the decline is replayed here, on the text or on its view), as
:func:`abstention.gather` does, without the semantic reading. ``read`` gives every
answered prefix, per variant, the shipped judge's probability and scope-bar veto, the
semantic check's reading (embedded in batches, cached by text) and whether the decline
would take it. A variant names what each of the three reads: ``t`` the typed text, ``v``
its request view (a situation still being typed: its last clause), ``w`` its request
view (a situation still being typed: the whole text); in the order judge, check,
decline, e.g. ``ttt`` (what ships), ``vvv``, ``vvt``. ``points`` replays the engine's
decision per ask (delegated when any prefix is: a decline, the judge under its
threshold or at a scope bar, the check at its bar and not overruled), for the shipped
thresholds and for a grid of them, per set and language.
"""

from __future__ import annotations

import itertools
import os
import pickle
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rtgate.apps.autocomplete.abstention import ASK_SETS, Row, gather
from rtgate.apps.autocomplete.engine import build_reader
from rtgate.apps.autocomplete.pool import units
from rtgate.core.request import Piece
from rtgate.domains.loader import Ask, load_judge, load_semantic_scope
from rtgate.models.embeddings import Embedder
from rtgate.tiers.clause_reader import request_view
from rtgate.tiers.textnorm import lang_of, normalize

Gathered = dict[str, tuple[list[Ask], list[Row]]]
COMPLEX_P, ZH_LONG = 0.7, 16  # the local tier's decline (Chinese), as shipped
OVERRULE = 0.99
EVERY = int(os.environ.get("EVERY", "1"))
LOWEST_T = 0.02  # the lowest typed threshold of the grid (no pause threshold is lower)


def cmd_gather(out: str, names: Sequence[str]) -> None:
    paths = [ASK_SETS[n] for n in names]
    got = gather(paths, semantic=False, local={"complex_langs": []})
    by_file = {p.name: n for n, p in zip(names, paths, strict=True)}
    with open(out, "wb") as f:
        pickle.dump({by_file[k]: v for k, v in got.items()}, f)


def _view(text: str, how: str) -> str:
    if how == "t":
        return text
    return request_view(text, unasked="last" if how == "v" else "whole")


def cmd_read(rows_path: str, out: str, variants: Sequence[str]) -> None:
    g: Gathered = {}
    for path in rows_path.split(","):
        with open(path, "rb") as f:
            g.update(pickle.load(f))
    judge = load_judge()
    scope = load_semantic_scope(embedder=Embedder(cache_size=0))
    assert scope is not None
    reader = build_reader()
    sem: dict[str, float] = {}
    feats: dict[str, list[float]] = {}

    def judged(text: str, logit_conf: float) -> tuple[float, bool]:
        if text not in feats:
            feats[text], _ = judge.features(text, Piece("", {"confidence": 0.5}))
        x = [logit_conf, *feats[text][1:]]  # the fast answer's own confidence
        return judge.probability(x), judge.vetoes(x)

    def declines(text: str, seen: str) -> bool:
        if lang_of(text) != "zh" or units(text) < ZH_LONG:
            return False
        return reader.read(seen).proba.get("complex", 0.0) >= COMPLEX_P

    result: dict[str, Any] = {"sets": {}}
    for name, (asks, rows) in g.items():
        if EVERY > 1:  # every EVERY-th ask only (time)
            keep = {k: k // EVERY for k in range(0, len(asks), EVERY)}
            asks = [asks[k] for k in keep]
            rows = [Row(keep[r.ask], r.prefix, r.kind, r.lang, r.x, r.label,
                        r.delegated_anyway, r.pause) for r in rows if r.ask in keep]  # fmt: skip
        per: dict[str, Any] = {"asks": asks, "rows": rows, "variants": {}}
        for var in variants:
            jv, sv, dv = var[0], var[1], var[2]
            p, veto, dec = [], [], []
            for r in rows:
                if r.x is None:
                    p.append(1.0)
                    veto.append(False)
                    dec.append(False)
                    continue
                pj, vj = judged(_view(r.prefix, jv), r.x[0])
                p.append(pj)
                veto.append(vj)
                dec.append(declines(r.prefix, _view(r.prefix, dv)))
            # an ask some prefix of which is delegated at every threshold of the grid
            # needs no reading; nor does a prefix the judge sends on at every threshold
            sure = np.zeros(len(asks), dtype=bool)
            for r, pj, vj, d in zip(rows, p, veto, dec, strict=True):
                sure[r.ask] |= r.delegated_anyway or vj or d or pj < LOWEST_T
            texts = [
                _view(r.prefix, sv) if r.x is not None and not sure[r.ask] and pj >= LOWEST_T
                else ""
                for r, pj in zip(rows, p, strict=True)
            ]  # fmt: skip
            need = list(dict.fromkeys(t for t in texts if t and t not in sem))
            for k in range(0, len(need), 64):
                part = need[k : k + 64]
                vs = scope.embedder.embed_many([normalize(t) for t in part])
                for t, v in zip(part, vs, strict=True):
                    sem[t] = scope.out_of_scope_of(v)
            per["variants"][var] = {
                "p": np.asarray(p),
                "veto": np.asarray(veto),
                "s": np.asarray([sem[t] if t else 0.0 for t in texts]),
                "decline": np.asarray(dec),
            }
            print(f"{name} {var}: {len(rows)} rows, {len(sem)} readings", flush=True)
        result["sets"][name] = per
    result["shipped"] = {
        "t": judge.threshold,
        "tp": judge.pause_threshold,
        "b": scope.bar,
        "pb": scope.pause_bar,
    }
    with open(out, "wb") as fo:
        pickle.dump(result, fo)


def went(per: Mapping[str, Any], var: str, t: float, tp: float, b: float, pb: float) -> Any:
    """Per ask, whether the engine would have sent it to the big model."""
    asks, rows = per["asks"], per["rows"]
    v = per["variants"][var]
    ask = np.asarray([r.ask for r in rows])
    pause = np.asarray([r.pause for r in rows])
    anyway = np.asarray([r.delegated_anyway for r in rows])
    answered = np.asarray([r.x is not None for r in rows])
    p, s = v["p"], v["s"]
    thr = np.where(pause, tp, t)
    bar = np.where(pause, pb, b)
    floor = np.where(pause, OVERRULE, 0.0)
    by_judge = answered & ((p < thr) | v["veto"])
    by_check = answered & (s >= bar) & ~(p >= np.maximum(floor, s))
    row_went = anyway | v["decline"] | by_judge | by_check
    out = np.zeros(len(asks), dtype=bool)
    np.logical_or.at(out, ask, row_went)
    return out


def shares(asks: Sequence[Ask], w: Any, lang: str = "all") -> tuple[float, float, int, int]:
    m = np.asarray([lang in ("all", a.lang) for a in asks])
    simple = np.asarray([a.kind == "simple" for a in asks])
    hard, easy = m & ~simple, m & simple
    c = float(w[hard].mean()) if hard.any() else float("nan")
    f = float((~w[easy]).mean()) if easy.any() else float("nan")
    return c, f, int(hard.sum()), int(easy.sum())


def cmd_points(read_path: str, fit: Sequence[str], check: Sequence[str]) -> None:
    sets: dict[str, Any] = {}
    for path in read_path.split(","):
        with open(path, "rb") as f:
            res = pickle.load(f)
        sets.update(res["sets"])
    sh = res["shipped"]
    names = list(sets)
    variants = list(next(iter(sets.values()))["variants"])
    base = (sh["t"], sh["tp"], sh["b"], sh["pb"])
    print("shipped thresholds", base)
    for var in variants:
        print(f"== variant {var} at the shipped thresholds (complex / simple kept fast)")
        for n in names:
            per = sets[n]
            w = went(per, var, *base)
            cells = []
            for lang in ("all", "zh", "en"):
                c, fa, nh, ne = shares(per["asks"], w, lang)
                cells.append(f"{lang} {100 * c:5.1f} / {100 * fa:5.1f} ({nh}/{ne})")
            print(f"  {n:6s} " + "  ".join(cells))
    grid = list(itertools.product(
        (0.02, 0.03, 0.05, 0.08, 0.11, 0.15, 0.2), (0.05, 0.1, 0.15, 0.22, 0.3),
        (0.9, 0.95, 0.97, 0.99, 1.01), (0.88, 0.9, 0.95, 0.97, 0.99, 1.01),
    ))  # fmt: skip

    def pooled(var: str, th: Any, among: Sequence[str]) -> tuple[float, float]:
        cs: list[bool] = []
        fs: list[bool] = []
        for n in among:
            per = sets[n]
            w = went(per, var, *th)
            simple = np.asarray([a.kind == "simple" for a in per["asks"]])
            cs.extend(w[~simple].tolist())
            fs.extend((~w[simple]).tolist())
        return float(np.mean(cs)), float(np.mean(fs))

    for var in variants:
        for pick, other in ((fit, check), (check, fit), (names, [])):
            best_p = max(grid, key=lambda th: min(pooled(var, th, pick)))
            c, fa = pooled(var, best_p, pick)
            print(f"== {var}: chosen on {'+'.join(pick)} pooled (max of the lower): {best_p}: "
                  f"{100 * c:.1f} / {100 * fa:.1f}")  # fmt: skip
            for n in [*pick, *other]:
                cells = []
                for lang in ("all", "zh", "en"):
                    cc, ff, _, _ = shares(sets[n]["asks"], went(sets[n], var, *best_p), lang)
                    cells.append(f"{lang} {100 * cc:5.1f} / {100 * ff:5.1f}")
                tag = "chosen on" if n in pick else "checked on"
                print(f"  {n:6s} " + "  ".join(cells) + f"  ({tag})")
    for var in variants:
        for pick, other in ((fit, check), (check, fit)):
            best = None
            pts = []
            for th in grid:
                lows = []
                for n in pick:
                    c, fa, _, _ = shares(sets[n]["asks"], went(sets[n], var, *th))
                    lows.append(min(c, fa))
                pts.append((min(lows), th))
                if best is None or min(lows) > best[0]:
                    best = (min(lows), th)
            assert best is not None
            th = best[1]
            print(f"== {var}: chosen on {'+'.join(pick)} (max of the lowest of complex and "
                  f"simple over those sets): t {th[0]} tp {th[1]} bar {th[2]} pause bar {th[3]}"
                  f", lowest {100 * best[0]:.1f}")  # fmt: skip
            for n in [*pick, *other]:
                c, fa, _, _ = shares(sets[n]["asks"], went(sets[n], var, *th))
                tag = "chosen on" if n in pick else "checked on"
                print(f"  {n:6s} {100 * c:5.1f} / {100 * fa:5.1f}  ({tag})")
    # the trade-off curve, all sets pooled, per variant: the operating points on the front
    for var in variants:
        front: list[tuple[float, float, Any]] = []
        for th in grid:
            cs, fs = [], []
            for n in names:
                per = sets[n]
                w = went(per, var, *th)
                simple = np.asarray([a.kind == "simple" for a in per["asks"]])
                cs.extend(w[~simple].tolist())
                fs.extend((~w[simple]).tolist())
            front.append((float(np.mean(cs)), float(np.mean(fs)), th))
        front.sort(key=lambda x: (-x[0], -x[1]))
        kept: list[tuple[float, float, Any]] = []
        for pt in front:
            if not kept or pt[1] > kept[-1][1]:
                kept.append(pt)
        print(f"== {var}: the front, all sets pooled (complex / simple kept fast: t, tp, b, pb)")
        for c, fa, th in kept:
            print(f"  {100 * c:5.1f} / {100 * fa:5.1f}  {th}")


if __name__ == "__main__":
    cmd, *args = sys.argv[1:]
    if cmd == "gather":
        cmd_gather(args[0], args[1:])
    elif cmd == "read":
        cmd_read(args[0], args[1], args[2:])
    elif cmd == "points":
        cmd_points(args[0], args[1].split(","), args[2].split(","))
    else:
        raise SystemExit(__doc__)
