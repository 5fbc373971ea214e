"""Fitting and measuring the judge that decides whether the fast suggestions can stand
alone (``rtgate intents judge``, ``rtgate bench abstention``).

Asks (:func:`~rtgate.domains.loader.load_asks`: ``simple``, ``multi``, ``ood``) are typed
the way the replay types them (:func:`~rtgate.apps.autocomplete.sessions.typed`: IME
commits for Chinese, keystrokes for English), then the typist pauses: the whole ask is
sent once more as a pause (``complete(…, pause=True)``). Only a prefix the engine may
send to the cloud counts for routing (long enough and at a word boundary, or the whole
ask at the pause: :meth:`~rtgate.apps.autocomplete.engine.AutocompleteEngine.may_delegate`).

- **Rows** (fitting, calibration): each such prefix a fast tier answered. Its label is 1
  when the fast answer was right: a simple ask whose intent is among the first three
  suggestions. A multi-part or out-of-domain ask's prefix is labelled 0 once it holds 60%
  of the ask (before that it may still read as its simple first part, and is left out).
- **Per ask** (the goals): a multi-part or out-of-domain ask *reached the big model* when
  any of its prefixes started a cloud job; a simple ask *stayed on the fast path* when
  none did. Top-3 intent is over the simple asks' prefixes (≥ 2 units, the whole ask
  excluded, as in ``rtgate bench autocomplete``). Each delegated ask is put down to the
  cause of its first cloud job (:func:`cause_of`, read from the trace), typed or at the
  pause: ``by_cause`` per kind and language.

The threshold is chosen on the tuning asks from out-of-fold predictions (5 folds, by
ask): the highest share of complex asks delegated with at least ``min_fast`` of the
simple asks left on the fast path. With it, the scope bars: a prefix the scope classifier
reads as multi-part or out-of-domain at or above its bar is delegated whatever the
logistic model says (a linear model caps what one sure input can weigh). The scope
classifier never learns from the tuning asks, so its readings of them are out of sample.

:func:`fit_single` fits the format-2 judge instead (one model, no hard bar chosen in
sample): the scope readings enter as logits, and a second weight set adds the semantic
check's reading of the prefix (``Row.semantic``, read when the rows are gathered). Its
four thresholds (typed or at the pause, without or with the semantic reading) and any
scope bar are chosen together on out-of-fold predictions over every fitting set
(:func:`pick_thresholds`); :func:`replay` gives a judge's shares on other rows without
running the engine again.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.apps.autocomplete.bench import pct
from rtgate.apps.autocomplete.engine import (
    FAST_WINDOW_CHARS,
    MAX_PREFIX_CHARS,
    MAXMIN_POINT,
    AutocompleteEngine,
    EngineConfig,
    may_delegate,
)
from rtgate.apps.autocomplete.pool import units
from rtgate.apps.autocomplete.sessions import lexicon, typed
from rtgate.core.errors import ConfigError, InvalidRequest
from rtgate.core.request import Request
from rtgate.core.trace import why_of
from rtgate.domains.loader import (
    DATA_DIR,
    Ask,
    familiarity,
    load_asks,
    load_classifier,
    load_corpus,
    load_scope,
    scope_ask_files,
    semantic_scope_examples,
    set_file,
    train_scope,
    vocabulary,
)
from rtgate.tiers.answerability import (
    SCOPE_LOGITS,
    CalibratedJudge,
    SemanticPart,
    expected_calibration_error,
    feature_names,
    fit_judge,
    reliability,
)
from rtgate.tiers.classifier import IntentClassifier, IntentRanker
from rtgate.tiers.semantic_scope import Neighbours, SemanticScope

__all__ = [
    "ASK_SETS",
    "CAUSES",
    "Row",
    "ask_set",
    "cause_of",
    "collect",
    "delegable",
    "evaluate",
    "fit",
    "fit_generic",
    "fit_neighbours",
    "fit_rows",
    "fit_scope_bars",
    "fit_single",
    "gather",
    "keys_of",
    "pick_pause_threshold",
    "pick_threshold",
    "pick_thresholds",
    "pool_rows",
    "prefixes_of",
    "read_semantic",
    "replay",
    "reread_scope",
    "run_sets",
]

ASK_SETS = {
    "tune": DATA_DIR / "asks-tune.jsonl",  # the judge is fitted on these
    "train2": DATA_DIR / "asks-train2.jsonl",  # learned from by the scope classifier
    "train3": DATA_DIR / "asks-train3.jsonl",  # learned from by the scope classifier
    "val": DATA_DIR / "asks-val.jsonl",  # written with the tuning asks, never fitted on
    "val2": DATA_DIR / "asks-val2.jsonl",  # short and near-domain asks, validation only
    "val3": DATA_DIR / "asks-val3.jsonl",  # written blind, validation (semantic_overrule)
    "eval": DATA_DIR / "asks-eval.jsonl",  # held out
    "eval2": DATA_DIR / "asks-eval2.jsonl",  # held out, written blind, measured once
    "eval3": DATA_DIR / "asks-eval3.jsonl",  # held out, written blind, measured once
    "eval4": DATA_DIR / "asks-eval4.jsonl",  # held out, written blind (session 9)
    "eval5": DATA_DIR / "asks-eval5.jsonl",  # held out, written blind (session 10)
    "eval6": DATA_DIR / "asks-eval6.jsonl",  # held out, written blind (session 11)
    "eval7": DATA_DIR / "asks-eval7.jsonl",  # held out, written blind (session 12)
    "eval8": DATA_DIR / "asks-eval8.jsonl",  # held out, written blind (session 13)
    "eval9": DATA_DIR / "asks-eval9.jsonl",  # held out, written blind (session 14)
    "eval10": DATA_DIR / "asks-eval10.jsonl",  # held out, written blind (session 15)
}
FAST = ("template", "cache", "local")
Bars = tuple[float, float]
_OFF = math.inf  # a scope bar nothing reaches
# the scope bars tried when fitting (a probability at or above one vetoes a fast answer)
BAR_GRID = (0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999, _OFF)
# the semantic check's bars tried by :func:`fit_neighbours`
SCOPE_BAR_GRID = tuple(k / 100.0 for k in range(30, 100))
_LATE = 0.6  # share of a complex ask after which its prefix is labelled "not answerable"
# why a prefix started a cloud job (:func:`cause_of`), in the order they are checked
CAUSES = ("scope_bar", "judge_semantic", "judge", "semantic", "declined_complex",
          "declined_unknown", "beyond_window", "budget", "other")  # fmt: skip
_BELOW = re.compile(r"\(p=\S+ < ")


def cause_of(trace: Mapping[str, Any]) -> str:
    """Why the answer whose ``trace`` (:meth:`~rtgate.core.trace.Trace.to_dict`) carries a
    cloud job started it, one of :data:`CAUSES`:

    - ``scope_bar``: the judge's scope bars vetoed the fast answer (whatever ``p`` said);
    - ``judge_semantic``: the judge, weighing the semantic check's reading, put
      ``p_right`` under its threshold (a format-2 judge);
    - ``judge``: the judge's ``p_right`` was under its threshold;
    - ``semantic``: the semantic scope check vetoed it (not overruled);
    - ``declined_complex`` / ``declined_unknown``: the local tier declined a long prefix it
      read as complex, or did not recognise, and nothing else answered;
    - ``beyond_window``: the prefix was longer than the fast tiers read
      (:data:`~rtgate.apps.autocomplete.engine.FAST_WINDOW_CHARS`);
    - ``budget``: no fast tier answered within the budget (cut off, or skipped as too slow);
    - ``other``: anything else (e.g. no candidates at all).
    """
    why = str(trace.get("abstained") or "")
    if why:
        if "scope bar reached" in why:
            return "scope_bar"
        if _BELOW.search(why) and "weighed" in why:
            return "judge_semantic"
        if _BELOW.search(why):
            return "judge"
        return "semantic" if "semantic scope" in why else "other"
    local = [a for a in trace.get("attempts", []) if a.get("tier") in FAST]
    if any(a.get("outcome") in ("cut_off", "skipped", "too_slow") for a in local):
        return "budget"
    if not local and "budget" in str(trace.get("degraded") or ""):
        return "budget"
    detail = " ".join(str(a.get("detail", "")) for a in local if a.get("outcome") == "declined")
    if "complex ask" in detail:
        return "declined_complex"
    if "unknown ask" in detail:
        return "declined_unknown"
    if "beyond the fast window" in detail:
        return "beyond_window"
    return "other"


@dataclass(slots=True)
class Row:
    """One prefix the engine could have sent to the cloud."""

    ask: int
    prefix: str
    kind: str
    lang: str
    x: list[float] | None  # the judge's inputs, when a fast tier answered
    label: int | None  # 1: the fast answer was right; None: not labelled
    delegated_anyway: bool  # nothing fast answered and a cloud job started
    pause: bool = False  # the whole ask, delegable only because the typist paused
    semantic: float | None = None  # the semantic check's reading, when gathered with it


def keys_of(text: str, lex: frozenset[str], rng: random.Random) -> list[str]:
    """The prefixes of ``text`` as the replay types them, up to the engine's hard limit
    (:data:`MAX_PREFIX_CHARS`, a few KB: no ask of a set reaches it). A prefix longer than
    the fast tiers' window (:data:`FAST_WINDOW_CHARS`) is typed too: the engine sends it to
    the big model."""
    return [k.prefix for k in typed(text, lex, rng) if len(k.prefix) <= MAX_PREFIX_CHARS]


def delegable(
    ask: Ask, lex: frozenset[str], seed: int, cfg: EngineConfig
) -> tuple[list[str], str | None]:
    """The prefixes of ``ask`` that may be delegated while typed (typed as the replay types
    them), and the whole ask when it may be at the typist's pause (else ``None``)."""
    keys = keys_of(ask.text, lex, random.Random(f"{seed}:{ask.text}"))
    whole = keys[-1] if keys and may_delegate(keys[-1], cfg, pause=True) else None
    return [p for p in keys if may_delegate(p, cfg)], whole


def _flagged(ask: Ask, lex: frozenset[str], seed: int, cfg: EngineConfig) -> list[tuple[str, bool]]:
    """The delegable prefixes of ``ask`` as typed (``False``), then the whole ask at the
    typist's pause (``True``) when it may be delegated then: :func:`evaluate` sends it once
    more at the pause even when it was also typed as a delegable prefix, and the judge's
    pause threshold and the scope's pause bar read it there (session 21: before, such an
    ask, most Chinese ones, had no pause row)."""
    typed_, whole = delegable(ask, lex, seed, cfg)
    out = [(p, False) for p in typed_]
    if whole is not None:
        out.append((whole, True))
    return out


def prefixes_of(ask: Ask, lex: frozenset[str], seed: int, engine: AutocompleteEngine) -> list[str]:
    """The prefixes of ``ask`` the engine may delegate, typed as the replay types them,
    and the whole ask at the typist's pause (each text once)."""
    return list(dict.fromkeys(p for p, _ in _flagged(ask, lex, seed, engine.config)))


def _label(ask: Ask, prefix: str) -> int | None:
    if ask.kind == "simple":
        return 1
    return 0 if units(prefix) >= _LATE * units(ask.text) else None


async def collect(
    engine: AutocompleteEngine, judge: CalibratedJudge, asks: Sequence[Ask], *, seed: int = 0
) -> list[Row]:
    """Rows for every delegable prefix of ``asks``, through ``engine``'s gate (which must
    have no judge of its own: the rows are what a judge is fitted on)."""
    lex = lexicon(e.text for e in load_corpus())
    rows: list[Row] = []
    for n, ask in enumerate(asks):
        for prefix, pause in _flagged(ask, lex, seed, engine.config):
            res = await engine.gate.answer(Request(input=prefix, delegate=True), 150.0)
            if res.job_id is not None:
                engine.cancel(res.job_id)
            if res.route in FAST and res.pieces:
                x, _ = judge.features(prefix, res.pieces[0])
                rows.append(Row(n, prefix, ask.kind, ask.lang, x, _label(ask, prefix),
                                False, pause))  # fmt: skip
            else:
                rows.append(Row(n, prefix, ask.kind, ask.lang, None, None,
                                res.job_id is not None, pause))  # fmt: skip
    return rows


def reread_scope(rows: Sequence[Row], scope: IntentRanker) -> None:
    """Put ``scope``'s reading of each answered row's prefix in place of its inputs' scope
    readings (``p_multi``, ``p_ood``, and :data:`SCOPE_LOGITS` when the row has them): the
    rows of a training ask set, read by a scope classifier that did not learn it."""
    n_in = len(feature_names())
    for r in rows:
        if r.x is None:
            continue
        kinds = dict(scope.rank(r.prefix)) if r.prefix.strip() else {}
        multi, ood = kinds.get("multi", 0.0), kinds.get("ood", 0.0)
        r.x[3], r.x[4] = multi, ood
        if len(r.x) == n_in + len(SCOPE_LOGITS):
            r.x[n_in], r.x[n_in + 1] = _logit(multi), _logit(ood)


def _logit(p: float) -> float:
    p = min(1.0 - 1e-4, max(1e-4, p))
    return math.log(p / (1.0 - p))


def _per_ask(
    rows: Sequence[Row],
    p: dict[int, float],
    threshold: float,
    bars: Bars = (_OFF, _OFF),
    pause_threshold: float | None = None,
) -> dict[int, bool]:
    """Whether each ask started a cloud job at ``threshold`` (``pause_threshold`` for a
    row at the pause, ``threshold`` when unset) and scope ``bars`` (multi, ood; ``p`` by
    row index)."""
    out: dict[int, bool] = {}
    for i, r in enumerate(rows):
        went = r.delegated_anyway
        if not went and i in p and r.x is not None:
            t = pause_threshold if r.pause and pause_threshold is not None else threshold
            went = p[i] < t or r.x[3] >= bars[0] or r.x[4] >= bars[1]
        out[r.ask] = out.get(r.ask, False) or went
    return out


def _shares(
    asks: Sequence[Ask], went: dict[int, bool], part: Sequence[int] | None = None
) -> dict[str, float]:
    """Complex asks that reached the big model, simple ones that did not, among ``part``
    (indices into ``asks``; all of them by default)."""
    idx = range(len(asks)) if part is None else part
    simple = [i for i in idx if asks[i].kind == "simple"]
    hard = [i for i in idx if asks[i].kind != "simple"]
    return {
        "complex_delegated": sum(went.get(i, False) for i in hard) / max(1, len(hard)),
        "simple_fast": sum(not went.get(i, False) for i in simple) / max(1, len(simple)),
    }


def _by_ask(
    rows: Sequence[Row], n_asks: int, p: Mapping[int, float]
) -> tuple[np.ndarray[Any, Any], ...]:
    """Per ask: delegated whatever the judge said, the lowest ``p`` of its typed and of its
    paused rows (1.0 when none), and its highest multi and ood readings (0.0): what
    :func:`_per_ask` reads, so that a threshold's shares are a few array operations."""
    anyway = np.zeros(n_asks, dtype=bool)
    typed_low, pause_low = np.ones(n_asks), np.ones(n_asks)
    multi, ood = np.zeros(n_asks), np.zeros(n_asks)
    for i, r in enumerate(rows):
        anyway[r.ask] |= r.delegated_anyway
        if i not in p or r.x is None:
            continue
        low = pause_low if r.pause else typed_low
        low[r.ask] = min(low[r.ask], p[i])
        multi[r.ask], ood[r.ask] = max(multi[r.ask], r.x[3]), max(ood[r.ask], r.x[4])
    return anyway, typed_low, pause_low, multi, ood


def _fast_shares(asks: Sequence[Ask], went: np.ndarray[Any, Any]) -> dict[str, float]:
    """:func:`_shares` of a per-ask array."""
    simple = np.asarray([a.kind == "simple" for a in asks], dtype=bool)
    n_simple, n_hard = int(simple.sum()), int((~simple).sum())
    return {
        "complex_delegated": int(went[~simple].sum()) / max(1, n_hard),
        "simple_fast": int((~went[simple]).sum()) / max(1, n_simple),
    }


def pick_threshold(
    rows: Sequence[Row],
    asks: Sequence[Ask],
    p: dict[int, float],
    *,
    min_fast: float = 0.96,
    bar_grid: Sequence[float] = (_OFF,),
) -> tuple[float, dict[str, float], Bars]:
    """The threshold and scope bars (multi, ood; each from ``bar_grid``) delegating the
    most complex asks with ``min_fast`` of the simple ones kept on the fast path, and
    their shares. On a tie: more simple asks kept fast, then the higher bars (fewer
    vetoes), then the lower threshold."""
    anyway, typed_low, pause_low, multi, ood = _by_ask(rows, len(asks), p)
    low = np.minimum(typed_low, pause_low)
    best: tuple[tuple[float, ...], float, dict[str, float], Bars] | None = None
    for k in range(1, 90):
        t = k / 100.0
        below = anyway | (low < t)
        for bars in itertools.product(bar_grid, bar_grid):
            shares = _fast_shares(asks, below | (multi >= bars[0]) | (ood >= bars[1]))
            if shares["simple_fast"] < min_fast:
                continue
            key = (shares["complex_delegated"], shares["simple_fast"], *sorted(bars), -t)
            if best is None or key > best[0]:
                best = (key, t, shares, bars)
    if best is None:
        t = 0.01
        return t, _shares(asks, _per_ask(rows, p, t)), (_OFF, _OFF)
    return best[1], best[2], best[3]


def pick_pause_threshold(
    rows: Sequence[Row],
    asks: Sequence[Ask],
    p: dict[int, float],
    threshold: float,
    bars: Bars,
    *,
    min_fast: float = 0.96,
) -> tuple[float, dict[str, float]]:
    """With ``threshold`` and ``bars`` chosen, the threshold for the whole ask at the pause
    (from ``threshold`` up) delegating the most complex asks with ``min_fast`` of the
    simple ones kept fast; on a tie the lower. One reading an ask, where typing gives
    several: a simple ask risks less at the pause, so its bar may be higher."""
    anyway, typed_low, pause_low, multi, ood = _by_ask(rows, len(asks), p)
    base = anyway | (typed_low < threshold) | (multi >= bars[0]) | (ood >= bars[1])
    best = (_fast_shares(asks, base | (pause_low < threshold)), threshold)
    for k in range(round(threshold * 100) + 1, 95):
        t = k / 100.0
        shares = _fast_shares(asks, base | (pause_low < t))
        if shares["simple_fast"] >= min_fast and (
            shares["complex_delegated"] > best[0]["complex_delegated"]
        ):
            best = (shares, t)
    return best[1], best[0]


def _out_of_fold(
    x: Sequence[Sequence[float]],
    y: Sequence[int],
    groups: Sequence[int],
    fit_on: Sequence[bool] | None = None,
    k: int = 5,
) -> list[float]:
    """Each row's probability from a judge fitted, without its group's fold, on the rows
    ``fit_on`` marks (all by default)."""
    use = fit_on if fit_on is not None else [True] * len(x)
    out = [0.0] * len(x)
    for fold in range(k):
        train = [i for i, g in enumerate(groups) if g % k != fold and use[i]]
        coef, b = fit_judge([x[i] for i in train], [y[i] for i in train])
        w = np.asarray(coef)
        for i, g in enumerate(groups):
            if g % k == fold:
                z = b + float(w @ np.asarray(x[i]))
                out[i] = 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))
    return out


def _folds(rows: Sequence[Row], k: int = 5) -> dict[int, float]:
    """Out-of-fold probabilities for the rows a fast tier answered, folds by ask (fitted
    on the labelled ones)."""
    answered = [i for i, r in enumerate(rows) if r.x is not None]
    p = _out_of_fold(
        [rows[i].x or [] for i in answered],
        [rows[i].label or 0 for i in answered],
        [rows[i].ask for i in answered],
        [rows[i].label is not None for i in answered],
        k,
    )
    return dict(zip(answered, p, strict=True))


def fit(
    asks_path: Path | Sequence[Path] = ASK_SETS["tune"],
    *,
    seed: int = 0,
    local: Mapping[str, Any] | None = None,
    pick_on: Sequence[str] | None = None,
    min_fast: float = 0.96,
) -> tuple[CalibratedJudge, dict[str, Any]]:
    """A judge fitted on the asks of ``asks_path`` (one file or several, pooled; through a
    judge-less engine whose local tier is built with ``local``, kept in the judge's meta),
    its thresholds and scope bars, and a report of its out-of-fold calibration and shares.

    A file of :func:`~rtgate.domains.loader.scope_ask_files` was learned by the shipped
    scope classifier: its rows are read by one that did not learn it
    (:func:`reread_scope`), so that the judge weighs scope readings as sure as they are
    on asks it has not seen. ``pick_on``: the file names whose asks choose the thresholds
    and bars (all by default)."""
    import asyncio

    paths = [asks_path] if isinstance(asks_path, Path) else list(asks_path)
    zeros = [0.0] * len(feature_names())
    clf = load_classifier("ngram")
    assert isinstance(clf, IntentClassifier)
    probe = CalibratedJudge(zeros, 0.0, 0.5, clf, vocabulary(), familiarity(clf), load_scope())

    async def rows_of(asks: Sequence[Ask]) -> list[Row]:
        cfg = EngineConfig(judge=False, semantic=False, seed=seed, local=dict(local or {}))
        async with AutocompleteEngine.build(cfg) as engine:
            return await collect(engine, probe, asks, seed=seed)

    gathered: dict[str, tuple[list[Ask], list[Row]]] = {}
    learned = {f.name for f in scope_ask_files()}
    for path in paths:
        asks = load_asks(path)
        rows = asyncio.run(rows_of(asks))
        if path.name in learned:
            reread_scope(rows, train_scope(leave_out=(path.name,)))
        gathered[path.name] = (asks, rows)
    judge, report = fit_rows(gathered, pick_on=pick_on, min_fast=min_fast)
    judge.ranker, judge.vocabulary = probe.ranker, probe.vocabulary
    judge.familiarity, judge.scope = probe.familiarity, probe.scope
    judge.meta["seed"] = seed
    if local:
        judge.meta["local"] = dict(local)
    return judge, report


def pool_rows(
    gathered: Mapping[str, tuple[Sequence[Ask], Sequence[Row]]],
) -> tuple[list[Ask], list[Row], list[str]]:
    """Every set's asks and rows as one: each row's ask index shifted past the asks of the
    sets before it, and the name of the set each ask came from."""
    asks: list[Ask] = []
    rows: list[Row] = []
    of: list[str] = []
    for name, (set_asks, set_rows) in gathered.items():
        base = len(asks)
        asks += set_asks
        of += [name] * len(set_asks)
        rows += [replace(w, ask=base + w.ask) for w in set_rows]
    return asks, rows, of


def fit_rows(
    gathered: Mapping[str, tuple[Sequence[Ask], Sequence[Row]]],
    *,
    pick_on: Sequence[str] | None = None,
    min_fast: float = 0.96,
) -> tuple[CalibratedJudge, dict[str, Any]]:
    """The format-1 judge on the rows of every set of ``gathered`` (by file name: asks and
    their rows, as :func:`collect` gives them), pooled: weights on every labelled row,
    threshold, scope bars and pause threshold chosen on out-of-fold predictions (5 folds
    by ask) over the asks of ``pick_on`` (all sets by default). The judge it returns has
    no readers (ranker, scope …): :func:`fit` gives it the domain's."""
    asks, rows, of = pool_rows(gathered)
    oof = _folds(rows)
    picks = set(gathered) if pick_on is None else set(pick_on)
    sub_asks, sub_rows, sub_p = _part(asks, rows, oof, [n in picks for n in of])
    threshold, shares, bars = pick_threshold(sub_rows, sub_asks, sub_p, min_fast=min_fast,
                                             bar_grid=BAR_GRID)  # fmt: skip
    pause_threshold, shares = pick_pause_threshold(sub_rows, sub_asks, sub_p, threshold, bars,
                                                   min_fast=min_fast)  # fmt: skip
    scope_bars = {k: v for k, v in zip(("multi", "ood"), bars, strict=True) if v != _OFF}
    labelled = [i for i in oof if rows[i].label is not None]
    coef, b = fit_judge([rows[i].x or [] for i in labelled], [rows[i].label or 0 for i in labelled])
    probs = [oof[i] for i in labelled]
    ys = [rows[i].label or 0 for i in labelled]
    went = _per_ask(rows, oof, threshold, bars, pause_threshold)
    per_set = {name: {k: round(v, 4) for k, v in _shares(
        asks, went, [k for k, n in enumerate(of) if n == name]).items()} for name in gathered
    }  # fmt: skip
    names = list(gathered)
    report = {
        "asks": names[0] if len(names) == 1 else names,
        "n_asks": len(asks),
        "n_rows": len(rows),
        "n_labelled": len(labelled),
        "threshold": threshold,
        "pause_threshold": pause_threshold,
        "scope_bars": scope_bars,
        "picked_on": sorted(picks),
        "min_fast": min_fast,
        "out_of_fold": {
            **{k: round(v, 4) for k, v in shares.items()},
            "per_set": per_set,
            "ece": round(expected_calibration_error(probs, ys), 4),
            "reliability": reliability(probs, ys),
        },
    }
    meta = {"fitted_on": report["asks"], **report}
    judge = CalibratedJudge(coef, b, threshold, meta=meta, scope_bars=scope_bars,
                            pause_threshold=pause_threshold)  # fmt: skip
    return judge, report


def _part(
    asks: Sequence[Ask], rows: Sequence[Row], p: Mapping[int, float], keep: Sequence[bool]
) -> tuple[list[Ask], list[Row], dict[int, float]]:
    """The asks ``keep`` marks, their rows and the rows' probabilities, numbered anew."""
    number = {k: j for j, k in enumerate(k for k, kept in enumerate(keep) if kept)}
    out_rows: list[Row] = []
    out_p: dict[int, float] = {}
    for i, r in enumerate(rows):
        if r.ask in number:
            if i in p:
                out_p[len(out_rows)] = p[i]
            out_rows.append(Row(number[r.ask], r.prefix, r.kind, r.lang, r.x, r.label,
                                r.delegated_anyway, r.pause, r.semantic))  # fmt: skip
    return [asks[k] for k in number], out_rows, out_p


async def evaluate(
    engine: AutocompleteEngine,
    asks: Sequence[Ask],
    *,
    seed: int = 0,
    budget_ms: float = 150.0,
    per_ask: bool = False,
) -> dict[str, Any]:
    """The goals on ``asks`` through ``engine.complete`` (the path a user's box takes);
    ``per_ask``: also each ask's outcome (``asks``: text, kind, lang, delegated, and
    when delegated the cause, the trace's line for it and the prefix that started the first
    cloud job)."""
    lex = lexicon(e.text for e in load_corpus())
    judge = engine.gate.judge
    # a late job: the check's veto, or (a judge that weighs the reading) the judge with it
    late_cause = "judge_semantic" if getattr(judge, "weighs", False) else "semantic"
    went: dict[int, bool] = {}
    probs: list[float] = []
    ys: list[int] = []
    hits = n_top = over = pauses = paused_jobs = 0
    lat: list[float] = []
    late: list[str] = []  # cloud jobs the semantic check started after a fast answer
    cause: dict[int, str] = {}  # each delegated ask: why its first cloud job started
    trigger: dict[int, str] = {}  # and the prefix that started it
    why: dict[int, str] = {}  # and the trace's line for it (the judge's inputs, a decline)

    def calibrate(ask: Ask, prefix: str, trace: dict[str, Any], pause: bool = False) -> None:
        """A reliability row for a judged prefix that may be delegated and is labelled."""
        conf = trace.get("confidence")
        if judge is None or conf is None or not engine.may_delegate(prefix, pause=pause):
            return
        label = _label(ask, prefix)
        if label is not None:
            probs.append(float(conf))
            ys.append(label)

    for i, ask in enumerate(asks):
        rng = random.Random(f"{seed}:{ask.text}")
        keys = keys_of(ask.text, lex, rng)
        jobs: list[str] = []
        for j, prefix in enumerate(keys):
            if units(prefix) < 2:
                continue
            res = await engine.complete(
                prefix, budget_ms, session=f"ask-{i}", on_late=lambda _p, j: late.append(j)
            )
            lat.append(res.elapsed_ms)
            over += res.elapsed_ms > budget_ms
            if res.job_id is not None:
                jobs.append(res.job_id)
                cause.setdefault(i, cause_of(res.trace))
                why.setdefault(i, why_of(res.trace))
                trigger.setdefault(i, prefix)
            # a person types a key every ~100-300 ms; the semantic check (10-50 ms) of a
            # word's end is done before the next key
            await engine.settle()
            if late:
                why.setdefault(i, engine.late_why.get(late[0], ""))
                jobs.extend(late)
                late.clear()
                cause.setdefault(i, late_cause)
                trigger.setdefault(i, prefix)
            if jobs:
                went[i] = True
            shown = [
                c for c in res.candidates if not (c.source == "cloud" and c.intent == "complex")
            ]
            if ask.kind == "simple" and j < len(keys) - 1:
                n_top += 1
                hits += ask.intent in [c.intent for c in shown[:3]]
            calibrate(ask, prefix, res.trace)
        if keys and not jobs:  # the typist stops: the whole ask is judged once more
            res = await engine.complete(
                keys[-1], budget_ms, session=f"ask-{i}", on_late=lambda _p, j: late.append(j),
                pause=True,
            )  # fmt: skip
            lat.append(res.elapsed_ms)
            over += res.elapsed_ms > budget_ms
            await engine.settle()
            calibrate(ask, keys[-1], res.trace, pause=True)
            if res.job_id is not None:
                cause.setdefault(i, cause_of(res.trace) + "@pause")
                why.setdefault(i, why_of(res.trace))
            elif late:
                cause.setdefault(i, late_cause + "@pause")
                why.setdefault(i, engine.late_why.get(late[0], ""))
            trigger.setdefault(i, keys[-1])
            jobs.extend([*late, *([res.job_id] if res.job_id is not None else [])])
            late.clear()
            pauses += 1
            paused_jobs += bool(jobs)
            went[i] = bool(jobs)
        for job in jobs:
            engine.cancel(job)
        engine.forget(f"ask-{i}")
    out: dict[str, Any] = {"n_asks": len(asks)}
    # asks longer than the fast tiers read (typed whole: the big model's past the window)
    out["beyond_window"] = sum(len(a.text) > FAST_WINDOW_CHARS for a in asks)
    # asks longer than the engine takes: judged on their first MAX_PREFIX_CHARS characters
    out["cut_at_limit"] = sum(len(a.text) > MAX_PREFIX_CHARS for a in asks)
    for lang in ("all", "zh", "en"):
        part = [k for k, a in enumerate(asks) if lang in ("all", a.lang)]
        block: dict[str, Any] = {}
        for kind in ("multi", "ood", "simple"):
            idx = [k for k in part if asks[k].kind == kind]
            share = sum(went.get(k, False) for k in idx) / max(1, len(idx))
            block[kind] = {"n": len(idx), "delegated": round(share, 4)}
        block.update({k: round(v, 4) for k, v in _shares(asks, went, part).items()})
        block["by_cause"] = {
            kind: _count(cause[k] for k in part if asks[k].kind == kind and went.get(k, False))
            for kind in ("simple", "multi", "ood")
        }
        out[lang] = block
    out["simple_top3"] = round(hits / max(1, n_top), 4)
    out["simple_prefixes"] = n_top
    out["pauses"] = {"n": pauses, "delegated": paused_jobs}
    if per_ask:
        out["asks"] = [{"text": a.text, "kind": a.kind, "lang": a.lang,
                        "delegated": went.get(k, False), "cause": cause.get(k),
                        "why": why.get(k) if went.get(k, False) else None,
                        "by_prefix": trigger.get(k) if went.get(k, False) else None}
                       for k, a in enumerate(asks)]  # fmt: skip
    out["over_budget"] = over
    out["p99_ms"] = round(pct(lat, 99), 3)
    snap = engine.snapshot()["semantic"]
    if snap is not None:
        out["semantic"] = snap
    if probs:
        out["calibration"] = {
            "n": len(probs),
            "ece": round(expected_calibration_error(probs, ys), 4),
            "reliability": reliability(probs, ys),
        }
    return out


def _count(causes: Iterable[str]) -> dict[str, int]:
    """How many asks each cause sent to the big model, most first."""
    tally: dict[str, int] = {}
    for c in causes:
        tally[c] = tally.get(c, 0) + 1
    return dict(sorted(tally.items(), key=lambda kv: (-kv[1], kv[0])))


def run_sets(
    names: Sequence[str],
    *,
    budget_ms: float = 150.0,
    seed: int = 0,
    judge: bool = True,
    semantic: bool = True,
    per_ask: bool = False,
    reads: Sequence[str] | None = None,
    point: str = "files",
) -> dict[str, Any]:
    """:func:`evaluate` on each ask set (a name such as ``tune`` or ``eval``, or a file:
    :func:`ask_set`), one fresh engine each (``judge=False``: the engine without its
    judge, for comparison; ``reads``: what the judge, the semantic check and the complex
    decline read, :attr:`EngineConfig.judge_reads` and the next two; unset: the engine's
    defaults; ``point``: the judge's thresholds and the check's bars, ``files`` (the
    default) or ``maxmin``, :data:`~rtgate.apps.autocomplete.engine.MAXMIN_POINT`)."""
    import asyncio

    from rtgate.core.heap import frozen_heap

    if point not in ("files", "maxmin"):
        raise ConfigError(f"unknown operating point {point!r}: files or maxmin")

    paths = {name: ask_set(name) for name in names}

    async def one(path: Path) -> dict[str, Any]:
        cfg = EngineConfig(seed=seed, judge=judge, semantic=semantic)
        if point == "maxmin":
            cfg.judge_thresholds = MAXMIN_POINT["judge_thresholds"]
            cfg.semantic_bars = MAXMIN_POINT["semantic_bars"]
        if reads is not None:
            for field_, name in zip(("judge_reads", "semantic_reads", "decline_reads"), reads,
                                    strict=True):  # fmt: skip
                if name not in ("text", "view", "view_whole"):
                    raise ConfigError(f"unknown reading {name!r}: text, view or view_whole")
                setattr(cfg, field_, name)
        async with AutocompleteEngine.build(cfg) as engine:
            # as `rtgate serve` and `bench autocomplete` do once started: the engine's
            # long-lived objects leave the collector's view, else a full collection scans
            # them on the loop (a 42 ms one measured mid-run) and a request near its budget
            # passes it
            with frozen_heap():  # unfrozen after: the next set's engine is another
                report = await evaluate(
                    engine, load_asks(path), seed=seed, budget_ms=budget_ms, per_ask=per_ask
                )
            report["judge"] = None if engine.gate.judge is None else engine.gate.judge.threshold
            report["reads"] = [cfg.judge_reads, cfg.semantic_reads, cfg.decline_reads]
            report["point"] = point
            return report

    return {name: asyncio.run(one(path)) for name, path in paths.items()}


def ask_set(name: str) -> Path:
    """The file of the ask set ``name`` (one of :data:`ASK_SETS`), or ``name`` itself as a
    path to a JSON Lines file of asks; ``InvalidRequest`` when it is neither."""
    path = set_file(name, ASK_SETS)
    if path is not None:
        return path
    raise InvalidRequest(f"unknown ask set {name!r}: one of {', '.join(ASK_SETS)}, or a file")


def fit_generic(
    asks_path: Path = ASK_SETS["tune"], *, min_fast: float = 0.96
) -> tuple[CalibratedJudge, dict[str, Any]]:
    """A judge of the text's own signals (no ranker, no domain words), fitted on whole
    asks: for a caller's finished turn, where no domain of its own is shipped. Its
    threshold keeps ``min_fast`` of the simple asks (out of fold) off the big model."""
    asks = load_asks(asks_path)
    probe = CalibratedJudge([0.0] * len(feature_names()), 0.0, 0.5)
    x = [probe.features(a.text)[0] for a in asks]
    y = [int(a.kind == "simple") for a in asks]
    oof = _out_of_fold(x, y, range(len(asks)))
    simple = sorted(oof[i] for i in range(len(asks)) if y[i])
    threshold = simple[int((1.0 - min_fast) * len(simple))] if simple else 0.5
    hard = [oof[i] for i in range(len(asks)) if not y[i]]
    coef, b = fit_judge(x, y)
    report = {
        "asks": asks_path.name,
        "n_asks": len(asks),
        "threshold": round(threshold, 4),
        "out_of_fold": {
            "complex_followed_up": round(sum(p < threshold for p in hard) / max(1, len(hard)), 4),
            "simple_fast": round(sum(p >= threshold for p in simple) / max(1, len(simple)), 4),
            "ece": round(expected_calibration_error(oof, y), 4),
        },
    }
    meta = {"fitted_on": asks_path.name, "signals_only": True, **report}
    judge = CalibratedJudge(coef, b, round(threshold, 4), meta=meta)
    return judge, report


def _scope_rows(asks: Sequence[Ask], seed: int) -> list[tuple[int, str, bool]]:
    """(ask, prefix, at the pause) for every prefix of ``asks`` the engine may delegate."""
    cfg = EngineConfig(seed=seed)
    lex = lexicon(e.text for e in load_corpus())
    rows: list[tuple[int, str, bool]] = []
    for n, ask in enumerate(asks):
        typed_, at_pause = delegable(ask, lex, seed, cfg)
        rows += [(n, p, False) for p in typed_]
        if at_pause is not None:
            rows.append((n, at_pause, True))
    return rows


def _set_bars(
    scope: SemanticScope,
    asks: Sequence[Ask],
    rows: Sequence[tuple[int, str, bool]],
    p_out: Sequence[float],
    keep: float,
) -> dict[str, float]:
    """Set ``scope``'s bars from its readings ``p_out`` of ``rows``: the lowest on
    :data:`SCOPE_BAR_GRID` with ``keep`` of the simple asks' typed prefixes all below
    ``bar``, and ``keep`` of their whole asks below ``pause_bar``; returns the shares
    those bars give on ``asks``."""
    typing: dict[int, float] = {}
    whole: dict[int, float] = {}
    for (n, _, pause), p in zip(rows, p_out, strict=True):
        if pause:
            whole[n] = p
        else:
            typing[n] = max(p, typing.get(n, 0.0))
    simple = [n for n, a in enumerate(asks) if a.kind == "simple"]

    def lowest(read: dict[int, float]) -> float:
        for bar in SCOPE_BAR_GRID:
            if sum(read.get(n, 0.0) < bar for n in simple) >= keep * len(simple):
                return bar
        return 1.0

    scope.bar, scope.pause_bar = lowest(typing), lowest(whole)
    went = {n: typing.get(n, 0.0) >= scope.bar or whole.get(n, 0.0) >= scope.pause_bar
            for n in range(len(asks))}  # fmt: skip
    return {k: round(v, 4) for k, v in _shares(asks, went).items()}


def fit_neighbours(
    scope: SemanticScope,
    asks_path: Path = ASK_SETS["tune"],
    *,
    keep: float = 0.985,
    seed: int = 0,
    batch: int = 64,
) -> dict[str, Any]:
    """Give ``scope`` its nearest-neighbour reading (:class:`Neighbours` over the examples
    its head learned from), fit the combiner on the prefixes of ``asks_path`` the engine
    may delegate (typed, and whole at the pause; a complex ask's from 60% of it on), and
    set its bars (:func:`_set_bars`). Returns the shares on those asks (in sample: the
    combiner has four weights)."""
    emb = scope.embedder
    examples, _ = semantic_scope_examples()
    seen: dict[str, bool] = {}
    for e in examples:
        key = scope.key(e.text)
        seen[key] = seen.get(key, False) or e.intent == "ood"
    texts = sorted(seen)
    vectors = np.concatenate([emb.embed_many(texts[k : k + batch])
                              for k in range(0, len(texts), batch)])  # fmt: skip
    near = Neighbours(vectors, np.asarray([seen[t] for t in texts]))
    asks = load_asks(asks_path)
    rows = _scope_rows(asks, seed)
    x: list[list[float]] = []
    for k in range(0, len(rows), batch):
        part = rows[k : k + batch]
        vs = emb.embed_many([scope.key(p) for _, p, _ in part])
        x += [near.features(v, scope.head_out_of_scope(v)) for v in vs]
    fit_on = [i for i, (n, p, _) in enumerate(rows) if _label(asks[n], p) is not None]
    near.fit([x[i] for i in fit_on], [1 - (_label(asks[rows[i][0]], rows[i][1]) or 0)
                                      for i in fit_on])  # fmt: skip
    scope.neighbours = near
    shares = _set_bars(scope, asks, rows, [near.probability_of(f) for f in x], keep)
    report = {"asks": asks_path.name, "n_examples": len(texts), "n_rows": len(rows),
              "bar": scope.bar, "pause_bar": scope.pause_bar,
              "weights": dict(zip(Neighbours.names(), near.coef.round(4).tolist(), strict=True)),
              "in_sample": shares}  # fmt: skip
    scope.meta["neighbours"] = report
    return report


def fit_scope_bars(
    scope: SemanticScope,
    asks_path: Path = ASK_SETS["tune"],
    *,
    keep: float = 0.985,
    seed: int = 0,
    batch: int = 64,
) -> dict[str, Any]:
    """Set ``scope``'s bars on its own readings (no neighbours) of the prefixes of
    ``asks_path`` the engine may delegate (:func:`_set_bars`); returns the shares."""
    asks = load_asks(asks_path)
    rows = _scope_rows(asks, seed)
    p_out: list[float] = []
    for k in range(0, len(rows), batch):
        vs = scope.embedder.embed_many([scope.key(p) for _, p, _ in rows[k : k + batch]])
        p_out += [scope.out_of_scope_of(v) for v in vs]
    shares = _set_bars(scope, asks, rows, p_out, keep)
    report = {"asks": asks_path.name, "n_rows": len(rows), "bar": scope.bar,
              "pause_bar": scope.pause_bar, "keep": keep, "in_sample": shares}  # fmt: skip
    scope.meta["bars"] = report
    return report


# -- the single judge (format 2) ---------------------------------------------------------

MODES = ("typed", "typed_semantic", "pause", "pause_semantic")
"""The four readings of a delegable prefix a format-2 judge has a threshold for."""
_GRID = tuple(k / 100.0 for k in range(1, 96))


def gather(
    paths: Sequence[Path],
    *,
    seed: int = 0,
    semantic: bool = True,
    batch: int = 64,
    local: Mapping[str, Any] | None = None,
) -> dict[str, tuple[list[Ask], list[Row]]]:
    """Asks and rows of each file in ``paths`` (by file name), through a judge-less engine
    (``local``: its local tier's keyword arguments), with a format-2 probe's inputs and
    (``semantic``) the semantic check's reading of every prefix a fast tier answered
    (embedded in batches: this is fitting, not serving)."""
    import asyncio

    from rtgate.domains.loader import load_semantic_scope
    from rtgate.models.embeddings import Embedder

    probe = _probe()
    scope = load_semantic_scope(embedder=Embedder(cache_size=0)) if semantic else None

    async def rows_of(asks: Sequence[Ask]) -> list[Row]:
        cfg = EngineConfig(judge=False, semantic=False, seed=seed, local=dict(local or {}))
        async with AutocompleteEngine.build(cfg) as engine:
            return await collect(engine, probe, asks, seed=seed)

    out: dict[str, tuple[list[Ask], list[Row]]] = {}
    for path in paths:
        asks = load_asks(path)
        rows = asyncio.run(rows_of(asks))
        if scope is not None:
            read_semantic(scope, rows, batch=batch)
        out[path.name] = (asks, rows)
    return out


def read_semantic(scope: SemanticScope, rows: Sequence[Row], *, batch: int = 64) -> None:
    """Set each answered row's ``semantic`` to ``scope``'s reading of its prefix (each
    text embedded once, in batches: this is fitting, not serving)."""
    texts = list(dict.fromkeys(r.prefix for r in rows if r.x is not None))
    read: dict[str, float] = {}
    for k in range(0, len(texts), batch):
        part = texts[k : k + batch]
        vs = scope.embedder.embed_many([scope.key(t) for t in part])
        read.update((t, scope.out_of_scope_of(v)) for t, v in zip(part, vs, strict=True))
    for r in rows:
        if r.x is not None:
            r.semantic = read[r.prefix]


def _probe() -> CalibratedJudge:
    """A weightless format-2 judge: what reads an ask's inputs."""
    clf = load_classifier("ngram")
    assert isinstance(clf, IntentClassifier)
    inputs = (*feature_names(), *SCOPE_LOGITS)
    return CalibratedJudge([0.0] * len(inputs), 0.0, 0.5, clf, vocabulary(), familiarity(clf),
                           load_scope(), inputs=inputs)  # fmt: skip


def _semantic_x(row: Row) -> list[float]:
    p = min(1.0 - 1e-4, max(1e-4, row.semantic if row.semantic is not None else 0.5))
    return [*(row.x or []), math.log(p / (1.0 - p))]


def _lowest(
    asks_n: int, rows: Sequence[Row], p: Mapping[str, Mapping[int, float]]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Per ask and mode (:data:`MODES`), the lowest probability of its rows read so (1.0
    when none), and per ask whether it was delegated whatever the judge said."""
    low = np.ones((asks_n, len(MODES)))
    anyway = np.zeros(asks_n, dtype=bool)
    for i, r in enumerate(rows):
        anyway[r.ask] |= r.delegated_anyway
        for m, mode in enumerate(MODES):
            if mode.startswith("pause") != r.pause or i not in p[mode]:
                continue
            low[r.ask, m] = min(low[r.ask, m], p[mode][i])
    return low, anyway


def _rows_p(judge: CalibratedJudge, rows: Sequence[Row]) -> dict[str, dict[int, float]]:
    """Each answered row's probability under ``judge``, per mode it can be read in."""
    plain = {i: judge.probability(r.x) for i, r in enumerate(rows) if r.x is not None}
    part = judge.semantic
    sem = {} if part is None else {
        i: part.probability(r.x, r.semantic)
        for i, r in enumerate(rows) if r.x is not None and r.semantic is not None
    }  # fmt: skip
    return {"typed": plain, "pause": plain, "typed_semantic": sem, "pause_semantic": sem}


def _went(
    low: np.ndarray[Any, Any],
    anyway: np.ndarray[Any, Any],
    t: Sequence[float],
    vetoed: np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    went = anyway | (low < np.asarray(t)).any(axis=1)
    return went if vetoed is None else went | vetoed


def pick_thresholds(
    low: np.ndarray[Any, Any],
    anyway: np.ndarray[Any, Any],
    simple: np.ndarray[Any, Any],
    *,
    min_fast: float = 0.96,
    vetoed: np.ndarray[Any, Any] | None = None,
) -> tuple[list[float], dict[str, float]]:
    """The four thresholds (:data:`MODES`) delegating the most complex asks with
    ``min_fast`` of the simple ones kept fast (``low``, ``anyway``: :func:`_lowest`;
    ``simple``: per ask; ``vetoed``: asks a scope bar sends on). ``min_fast`` counts the
    simple asks the judge could keep: those no fast tier left to the cloud ``anyway``.
    On a tie: more simple asks kept fast, then the lower thresholds. A coarse grid
    (0.05), then steps of 0.01 around the best, one threshold at a time, until nothing
    improves."""
    hard = ~simple
    simple = simple & ~anyway

    def key(t: Sequence[float]) -> tuple[float, float, float] | None:
        went = _went(low, anyway, t, vetoed)
        fast = float((~went[simple]).mean()) if simple.any() else 1.0
        if fast < min_fast:
            return None
        return (float(went[hard].mean()) if hard.any() else 0.0, fast, -float(sum(t)))

    coarse = np.arange(20) / 20.0
    below = low.T[:, None, :] < coarse[None, :, None]  # mode, threshold, ask
    base = anyway if vetoed is None else anyway | vetoed
    tail = below[2][:, None, :] | below[3][None, :, :]  # the pause modes, every pair
    n_simple, n_hard = max(1, int(simple.sum())), max(1, int(hard.sum()))
    best: tuple[tuple[float, float, float], list[float]] | None = None
    for a, b in itertools.product(range(len(coarse)), repeat=2):
        went = base | below[0][a] | below[1][b] | tail
        fast = (~went & simple).sum(axis=-1) / n_simple
        done = (went & hard).sum(axis=-1) / n_hard
        total = coarse[a] + coarse[b] + coarse[:, None] + coarse[None, :]
        score = np.where(fast >= min_fast, done * 1e6 + fast * 1e3 - total, -np.inf)
        c, d = np.unravel_index(int(np.argmax(score)), score.shape)
        if np.isfinite(score[c, d]):
            t = [float(coarse[a]), float(coarse[b]), float(coarse[c]), float(coarse[d])]
            k = key(t)
            if k is not None and (best is None or k > best[0]):
                best = (k, t)
    everyone = simple | (anyway & ~hard)
    if best is None:
        t0 = [0.0] * len(MODES)
        return t0, _asks_shares(_went(low, anyway, t0, vetoed), everyone)
    improved = True
    while improved:
        improved = False
        for m in range(len(MODES)):
            for v in (0.0, *_GRID):
                t = [*best[1]]
                t[m] = v
                k = key(t)
                if k is not None and k > best[0]:
                    best, improved = (k, t), True
    return best[1], _asks_shares(_went(low, anyway, best[1], vetoed), everyone)


def _vetoed(rows: Sequence[Row], n: int, bars: Bars) -> np.ndarray[Any, Any]:
    """Per ask, whether a scope bar (multi, ood) vetoes one of its answered prefixes."""
    out = np.zeros(n, dtype=bool)
    for r in rows:
        if r.x is not None and (r.x[3] >= bars[0] or r.x[4] >= bars[1]):
            out[r.ask] = True
    return out


def _asks_shares(went: np.ndarray[Any, Any], simple: np.ndarray[Any, Any]) -> dict[str, float]:
    hard = ~simple
    return {
        "complex_delegated": round(float(went[hard].mean()) if hard.any() else 0.0, 4),
        "simple_fast": round(float((~went[simple]).mean()) if simple.any() else 1.0, 4),
    }


def fit_single(
    gathered: Mapping[str, tuple[Sequence[Ask], Sequence[Row]]],
    *,
    min_fast: float = 0.96,
    bar_grid: Sequence[float] = BAR_GRID,
    k: int = 5,
    pick_on: Sequence[str] | None = None,
    local: Mapping[str, Any] | None = None,
) -> tuple[CalibratedJudge, dict[str, Any]]:
    """The format-2 judge fitted on every set of ``gathered`` (:func:`gather`) together:
    its two weight sets, its four thresholds and scope bars chosen on out-of-fold
    predictions (folds by ask, across the sets; ``pick_on``: only the asks of these sets
    choose them, all by default), and a report of its out-of-fold calibration (ECE,
    reliability) and shares, per set and in all. ``local``: the local tier's keyword
    arguments the rows were gathered with, kept in the judge's meta (the engine builds
    its local tier so)."""
    asks, rows, _ = pool_rows(gathered)
    answered = [i for i, r in enumerate(rows) if r.x is not None]
    with_sem = [i for i in answered if rows[i].semantic is not None]
    groups = [rows[i].ask for i in answered]
    fit_on = [rows[i].label is not None for i in answered]
    ys = [rows[i].label or 0 for i in answered]
    oof_plain = _out_of_fold([rows[i].x or [] for i in answered], ys, groups, fit_on, k)
    oof_sem = _out_of_fold([_semantic_x(rows[i]) for i in with_sem],
                           [rows[i].label or 0 for i in with_sem], [rows[i].ask for i in with_sem],
                           [rows[i].label is not None for i in with_sem], k)  # fmt: skip
    plain = dict(zip(answered, oof_plain, strict=True))
    sem = dict(zip(with_sem, oof_sem, strict=True))
    p = {"typed": plain, "pause": plain, "typed_semantic": sem, "pause_semantic": sem}
    low, anyway = _lowest(len(asks), rows, p)
    simple = np.asarray([a.kind == "simple" for a in asks])
    chooses = np.zeros(len(asks), dtype=bool)
    base = 0
    for name, (set_asks, _) in gathered.items():
        chooses[base : base + len(set_asks)] = pick_on is None or name in pick_on
        base += len(set_asks)
    best: tuple[tuple[float, float], list[float], Bars, dict[str, float]] | None = None
    for bars in itertools.product(bar_grid, bar_grid):
        vetoed = _vetoed(rows, len(asks), bars)[chooses]
        mine = simple[chooses]
        if bars != (_OFF, _OFF) and (vetoed & mine).sum() > (1.0 - min_fast) * mine.sum():
            continue
        t, shares = pick_thresholds(low[chooses], anyway[chooses], mine, min_fast=min_fast,
                                    vetoed=vetoed)  # fmt: skip
        key = (shares["complex_delegated"], shares["simple_fast"])
        if best is None or key > best[0] or (key == best[0] and sorted(bars) > sorted(best[2])):
            best = (key, t, bars, shares)
    assert best is not None
    _, t, bars, shares = best
    labelled = [i for i in answered if rows[i].label is not None]
    coef, b = fit_judge([rows[i].x or [] for i in labelled], [rows[i].label or 0 for i in labelled])
    labelled_sem = [i for i in with_sem if rows[i].label is not None]
    scoef, sb = fit_judge([_semantic_x(rows[i]) for i in labelled_sem],
                          [rows[i].label or 0 for i in labelled_sem])  # fmt: skip
    scope_bars = {n: v for n, v in zip(("multi", "ood"), bars, strict=True) if v != _OFF}

    def calibration(pp: Mapping[int, float]) -> dict[str, Any]:
        idx = [i for i in pp if rows[i].label is not None]
        got, truth = [pp[i] for i in idx], [rows[i].label or 0 for i in idx]
        return {"n": len(idx), "ece": round(expected_calibration_error(got, truth), 4),
                "reliability": reliability(got, truth)}  # fmt: skip

    went = _went(low, anyway, t, _vetoed(rows, len(asks), bars))
    per_set: dict[str, Any] = {}
    base = 0
    for name, (set_asks, _) in gathered.items():
        cut = slice(base, base + len(set_asks))
        per_set[name] = _asks_shares(went[cut], simple[cut])
        base += len(set_asks)
    report: dict[str, Any] = {
        "asks": list(gathered),
        "n_asks": len(asks),
        "n_rows": len(rows),
        "n_labelled": len(labelled),
        "n_labelled_semantic": len(labelled_sem),
        "min_fast": min_fast,
        "picked_on": list(pick_on) if pick_on is not None else list(gathered),
        "local": dict(local or {}),
        "thresholds": dict(zip(MODES, t, strict=True)),
        "scope_bars": scope_bars,
        "out_of_fold": {**shares, "per_set": per_set,
                        "typed": calibration(plain), "semantic": calibration(sem)},
    }  # fmt: skip
    probe = _probe()
    part = SemanticPart(scoef, sb, t[1], t[3])
    judge = CalibratedJudge(coef, b, t[0], probe.ranker, probe.vocabulary, probe.familiarity,
                            probe.scope, {"fitted_on": list(gathered), **report}, scope_bars,
                            t[2], probe.inputs, part)  # fmt: skip
    return judge, report


def replay(judge: CalibratedJudge, asks: Sequence[Ask], rows: Sequence[Row]) -> dict[str, Any]:
    """The shares ``judge`` would give on ``rows`` (:func:`gather`: the engine's fast
    answers, the judge's inputs and the semantic reading of each delegable prefix), with
    the engine's rule: an ask is delegated when any of its prefixes is, typed or at the
    pause, before or after the semantic check read it. Per language too."""
    p = _rows_p(judge, rows)
    t = [judge.threshold, judge.semantic.threshold if judge.semantic else 0.0,
         judge.pause_threshold if judge.pause_threshold is not None else judge.threshold,
         judge.semantic.pause_threshold if judge.semantic else 0.0]  # fmt: skip
    low, anyway = _lowest(len(asks), rows, p)
    bars = (judge.scope_bars.get("multi", _OFF), judge.scope_bars.get("ood", _OFF))
    went = _went(low, anyway, t, _vetoed(rows, len(asks), bars))
    simple = np.asarray([a.kind == "simple" for a in asks])
    out: dict[str, Any] = _asks_shares(went, simple)
    for lang in ("zh", "en"):
        mask = np.asarray([a.lang == lang for a in asks])
        out[lang] = _asks_shares(went[mask], simple[mask])
    return out
