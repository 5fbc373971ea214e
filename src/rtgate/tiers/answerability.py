"""Can the fast path answer this? A calibrated probability that a fast tier's answer is
right, from the tier's own confidence and the ask's complexity signals.

A fast tier (template, cache, classifier) reports how sure it is of *its* reading; it
cannot see that the ask has three questions in it, or is about a mortgage. A
:class:`Judge` weighs both into ``p_right``, the probability that the fast answer is what
the caller needed, and the gate delegates to the big model when that is too low
(:mod:`rtgate.gate.walk`). :class:`CalibratedJudge` is a logistic model over
:class:`~rtgate.tiers.complexity.Signals` and the classifier's reading, fitted on held-out
asks (:func:`fit_judge`) and saved as JSON beside the domain's data; its calibration is
checked with :func:`reliability` and :func:`expected_calibration_error`.

A judge of file format 2 reads the scope classifier's readings as logits too
(:data:`SCOPE_LOGITS`: a sure reading can outweigh the rest, where format 1 needed hard
scope bars beside the model), and may carry a second weight set, :class:`SemanticPart`:
the same inputs and the semantic scope check's reading, used when the request carries
one (``meta["semantic_out"]``, set where the check has run: off the keystroke path).
Format 1 files still load and judge as before.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from rtgate.core.errors import ConfigError
from rtgate.core.request import Piece, Request
from rtgate.tiers._linear import FloatArray
from rtgate.tiers.classifier import IntentClassifier, IntentRanker
from rtgate.tiers.complexity import Signals, Vocabulary, read_signals

__all__ = [
    "SCOPE_LOGITS",
    "SEMANTIC",
    "CalibratedJudge",
    "Familiarity",
    "Judge",
    "SemanticPart",
    "Verdict",
    "expected_calibration_error",
    "feature_names",
    "fit_judge",
    "reliability",
]

_FORMAT_1 = "rtgate.judge/1"
_FORMAT = "rtgate.judge/2"
_EPS = 1e-4
_HEAD = 5  # the first inputs: confidence, top-3 mass, p_complex, p_multi, p_ood
SCOPE_LOGITS = ("logit_multi", "logit_ood")
"""Inputs a format-2 judge adds to :func:`feature_names`: the scope readings as logits."""
SEMANTIC = "logit_semantic"
"""The input :class:`SemanticPart` adds: the logit of the semantic check's reading."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A judge's word on one fast answer: the probability it is right, the bar it must
    reach, and the signals that weighed against it (for the trace). ``vetoed``: the ask
    reads so surely as multi-part or out-of-domain that it goes to the big model whatever
    ``p_right`` says."""

    p_right: float
    threshold: float
    reasons: tuple[str, ...] = ()
    vetoed: bool = False

    @property
    def answerable(self) -> bool:
        return not self.vetoed and self.p_right >= self.threshold

    def why(self) -> str:
        """One line for a trace: ``"p=0.12 < 0.40: 3 clauses, 2 intents"``."""
        sign = ">=" if self.p_right >= self.threshold else "<"
        head = f"p={self.p_right:.2f} {sign} {self.threshold:.2f}"
        if self.vetoed:
            head += " (vetoed)"
        return f"{head}: {', '.join(self.reasons)}" if self.reasons else head


class Judge(Protocol):
    """Decides whether a fast answer can stand alone. ``piece`` is the fast tier's first
    piece (its ``data`` may carry a ``confidence``), ``None`` to judge the ask alone."""

    threshold: float

    def judge(self, request: Request, piece: Piece | None) -> Verdict: ...


def feature_names() -> list[str]:
    """The inputs of a format-1 :class:`CalibratedJudge`, in order (a format-2 judge
    names its own: these and :data:`SCOPE_LOGITS`)."""
    return ["logit_confidence", "logit_top3", "p_complex", "p_multi", "p_ood",
            *Familiarity.names(), *Signals.names()]  # fmt: skip


class Familiarity:
    """How much an ask looks like what the domain knows, read through an
    :class:`~rtgate.tiers.classifier.IntentClassifier`'s own n-gram space:

    - ``max_logit``: the classifier's best raw score (before its calibrated softmax, which
      hides that an out-of-domain ask scores low for *every* intent);
    - ``known``: the share of the ask's n-grams (IDF-weighted) the classifier has seen;
    - ``nearest``: the cosine similarity of the nearest example of ``texts`` (the corpus).

    A few hundred microseconds an ask; numpy only.
    """

    def __init__(self, classifier: IntentClassifier, texts: Sequence[str]) -> None:
        self.classifier = classifier
        cols: list[npt.NDArray[np.intp]] = []
        rows: list[npt.NDArray[np.intp]] = []
        vals: list[FloatArray] = []
        for r, text in enumerate(texts):
            ids, v = classifier.features(text)
            cols.append(ids)
            rows.append(np.full(len(ids), r, dtype=np.intp))
            vals.append(v)
        col = np.concatenate(cols) if cols else np.zeros(0, dtype=np.intp)
        order = np.argsort(col, kind="stable")
        self._n = len(texts)
        self._rows = (np.concatenate(rows) if rows else col)[order]
        self._vals = (np.concatenate(vals) if vals else np.zeros(0))[order]
        # postings of n-gram j: self._rows/_vals[start[j]:start[j + 1]]
        self._start = np.searchsorted(col[order], np.arange(len(classifier.idf) + 1))

    @staticmethod
    def names() -> list[str]:
        return ["max_logit", "known", "nearest"]

    def measure(self, text: str) -> list[float]:
        clf = self.classifier
        ids, vals = clf.features(text)
        head = clf.head
        max_logit = float((vals @ head.coef[ids] + head.intercept).max()) if len(ids) else 0.0
        known = clf.known_share(text)
        if not len(ids) or not self._n:
            return [max_logit, known, 0.0]
        starts = self._start[ids]
        sizes = self._start[ids + 1] - starts
        if not sizes.sum():
            return [max_logit, known, 0.0]
        # every posting of every n-gram of the text, in one gather
        offsets = np.cumsum(sizes) - sizes
        take = np.arange(int(sizes.sum())) - np.repeat(offsets - starts, sizes)
        weights = np.repeat(vals, sizes) * self._vals[take]
        sims = np.bincount(self._rows[take], weights=weights, minlength=self._n)
        return [max_logit, known, float(sims.max())]


def _logit(p: float) -> float:
    p = min(1.0 - _EPS, max(_EPS, p))
    return math.log(p / (1.0 - p))


def _logistic(coef: Sequence[float], intercept: float, x: Sequence[float]) -> float:
    z = intercept + sum(w * v for w, v in zip(coef, x, strict=True))
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


@dataclass(frozen=True, slots=True)
class SemanticPart:
    """The judge's weights when the semantic scope check has read the ask: the judge's
    inputs and :data:`SEMANTIC`, with thresholds of their own (typed, and at the pause;
    fitted and chosen with the rest of the judge)."""

    coef: Sequence[float]
    intercept: float
    threshold: float
    pause_threshold: float

    def probability(self, x: Sequence[float], p_out: float) -> float:
        return _logistic(self.coef, self.intercept, [*x, _logit(p_out)])

    def to_dict(self) -> dict[str, Any]:
        return {
            "coef": [round(float(w), 6) for w in self.coef],
            "intercept": round(float(self.intercept), 6),
            "threshold": self.threshold,
            "pause_threshold": self.pause_threshold,
        }


@dataclass(slots=True)
class CalibratedJudge:
    """A logistic model over :func:`feature_names` (see the module docstring).

    ``ranker`` reads the ask (top intent, top-3 mass, the ``complex`` intent) and each of
    its clauses; ``vocabulary`` tells words the domain never uses. ``threshold`` is the
    ``p_right`` below which the gate delegates, chosen when the judge was fitted.
    ``scope_bars`` (``multi``, ``ood``): a scope probability at or above its bar vetoes
    the fast answer (:attr:`Verdict.vetoed`); chosen with the threshold, absent: no veto.
    ``pause_threshold``: the threshold for a request whose ``meta["pause"]`` is true (the
    whole ask, sent when the user stopped typing); ``threshold`` when unset.
    ``inputs``: the names of the inputs ``coef`` weighs (:func:`feature_names` when
    empty; a format-2 judge adds :data:`SCOPE_LOGITS`). ``semantic``: the weights used
    instead when the request carries the semantic check's reading (``meta["semantic_out"]``).
    """

    coef: Sequence[float]
    intercept: float
    threshold: float
    ranker: IntentRanker | None = None
    vocabulary: Vocabulary | None = None
    familiarity: Familiarity | None = None
    scope: IntentRanker | None = None  # classes simple / multi / ood
    meta: dict[str, Any] = field(default_factory=dict)
    scope_bars: dict[str, float] = field(default_factory=dict)
    pause_threshold: float | None = None
    inputs: tuple[str, ...] = ()
    semantic: SemanticPart | None = None
    # what the judge reads of an ask (``None``: all of it); e.g. its request view
    # (:func:`~rtgate.tiers.clause_reader.request_view`): the clauses that ask, without
    # the situation a long personal ask tells first. Set by the app, not saved.
    view: Callable[[str], str] | None = None

    def __post_init__(self) -> None:
        if not self.inputs:
            self.inputs = tuple(feature_names())
        unknown = [n for n in self.inputs if n not in (*feature_names(), *SCOPE_LOGITS)]
        if unknown:
            raise ConfigError(f"judge: unknown inputs {', '.join(unknown)}")
        head = tuple(feature_names()[:_HEAD])  # judge() and vetoes() read these by position
        if self.inputs[:_HEAD] != head:
            raise ConfigError(f"judge: the inputs must start with {', '.join(head)}")
        if len(self.coef) != len(self.inputs):
            raise ConfigError(f"judge: {len(self.coef)} weights for {len(self.inputs)} inputs")
        if self.semantic is not None and len(self.semantic.coef) != len(self.inputs) + 1:
            raise ConfigError(f"judge: the semantic part needs {len(self.inputs) + 1} weights")

    @property
    def weighs_semantic(self) -> bool:
        """Whether the semantic check's reading is one of this judge's inputs."""
        return self.semantic is not None

    def features(self, text: str, piece: Piece | None = None) -> tuple[list[float], Signals]:
        """The model's inputs for ``text`` (and a fast answer's claimed confidence)."""
        top1, top3, p_complex = 1.0, 1.0, 0.0
        if self.ranker is not None and text.strip():
            ranked = self.ranker.rank(text)
            top1 = ranked[0][1]
            top3 = sum(p for _, p in ranked[:3])
            p_complex = dict(ranked).get("complex", 0.0)
        conf = top1
        data: Mapping[str, Any] | None = piece.data if piece is not None else None
        claimed = data.get("confidence") if data is not None else None
        if isinstance(claimed, int | float) and not isinstance(claimed, bool):
            conf = float(claimed)
        p_multi = p_ood = 0.0
        if self.scope is not None and text.strip():
            kinds = dict(self.scope.rank(text))
            p_multi, p_ood = kinds.get("multi", 0.0), kinds.get("ood", 0.0)
        signals = read_signals(text, vocabulary=self.vocabulary, ranker=self.ranker)
        known = self.familiarity.measure(text) if self.familiarity is not None else [0.0, 1.0, 1.0]
        head = [_logit(conf), _logit(top3), p_complex, p_multi, p_ood]
        every = [*head, *known, *signals.features()]
        if self.inputs == tuple(feature_names()):
            return every, signals
        named = dict(zip(feature_names(), every, strict=True))
        named.update(zip(SCOPE_LOGITS, (_logit(p_multi), _logit(p_ood)), strict=True))
        return [named[n] for n in self.inputs], signals

    def probability(self, x: Sequence[float]) -> float:
        return _logistic(self.coef, self.intercept, x)

    def judge(self, request: Request, piece: Piece | None) -> Verdict:
        text = request.input if self.view is None else self.view(request.input)
        x, signals = self.features(text, piece)
        pause = bool(request.meta.get("pause"))
        reasons = signals.reasons()
        for name, at in (("complex", 2), ("multi-part", 3), ("out-of-domain", 4)):
            if x[at] >= 0.5:
                reasons.insert(0, f"reads as {name} (p={x[at]:.2f})")
        p_out = request.meta.get("semantic_out")
        part = self.semantic
        if part is not None and isinstance(p_out, int | float) and not isinstance(p_out, bool):
            p = part.probability(x, float(p_out))
            bar = part.pause_threshold if pause else part.threshold
            # both inputs, so a trace tells which one tipped the decision
            alone = self.probability(x)
            reasons.append(
                f"semantic scope {float(p_out):.2f} weighed with the judge's p={alone:.2f}"
            )
        else:
            p = self.probability(x)
            bar = self.threshold
            if pause and self.pause_threshold is not None:
                bar = self.pause_threshold
        vetoed = self.vetoes(x)
        if vetoed:
            reasons.insert(0, "scope bar reached")
        return Verdict(p, bar, tuple(reasons), vetoed)

    def vetoes(self, x: Sequence[float]) -> bool:
        """Whether inputs ``x`` reach a scope bar (see the class docstring)."""
        bars = self.scope_bars
        return x[3] >= bars.get("multi", math.inf) or x[4] >= bars.get("ood", math.inf)

    # -- persistence ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        v1 = self.inputs == tuple(feature_names()) and self.semantic is None
        out: dict[str, Any] = {
            "format": _FORMAT_1 if v1 else _FORMAT,
            "features": list(self.inputs),
            "coef": [round(float(w), 6) for w in self.coef],
            "intercept": round(float(self.intercept), 6),
            "threshold": self.threshold,
        }
        if self.scope_bars:
            out["scope_bars"] = dict(self.scope_bars)
        if self.pause_threshold is not None:
            out["pause_threshold"] = self.pause_threshold
        if self.semantic is not None:
            out["semantic"] = self.semantic.to_dict()
        out["meta"] = self.meta
        return out

    def save(self, path: str | Path) -> None:
        text = json.dumps(self.to_dict(), indent=1, ensure_ascii=False)
        Path(path).write_text(text + "\n", encoding="utf-8")

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        ranker: IntentRanker | None = None,
        vocabulary: Vocabulary | None = None,
        familiarity: Familiarity | None = None,
        scope: IntentRanker | None = None,
    ) -> CalibratedJudge:
        """A judge saved by :meth:`save` (format 1 or 2); ``ConfigError`` if the file is not
        one, is of another format, or was fitted on other inputs than this version reads."""
        try:
            raw = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{path}: cannot read the judge: {e}") from e
        if not isinstance(raw, dict) or not str(raw.get("format", "")).startswith("rtgate.judge/"):
            raise ConfigError(f"{path}: not a judge file ({_FORMAT_1} or {_FORMAT})")
        version = raw["format"]
        if version not in (_FORMAT_1, _FORMAT):
            raise ConfigError(
                f"{path}: judge file format {version}; this version reads {_FORMAT_1} and "
                f"{_FORMAT} (refit it: rtgate intents judge)"
            )
        names = raw.get("features")
        known = (*feature_names(), *SCOPE_LOGITS)
        if version == _FORMAT_1 and names != feature_names():
            raise ConfigError(f"{path}: fitted on other inputs; refit it (rtgate intents judge)")
        if not isinstance(names, list) or not names or any(n not in known for n in names):
            raise ConfigError(f"{path}: fitted on other inputs; refit it (rtgate intents judge)")
        try:
            coef = [float(w) for w in raw["coef"]]
            intercept, threshold = float(raw["intercept"]), float(raw["threshold"])
            part = raw.get("semantic")
            semantic = None if version == _FORMAT_1 or part is None else SemanticPart(
                [float(w) for w in part["coef"]], float(part["intercept"]),
                float(part["threshold"]), float(part["pause_threshold"]))  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"{path}: malformed judge: {e}") from e
        if len(coef) != len(names):
            raise ConfigError(f"{path}: malformed judge: {len(coef)} weights for {len(names)}")
        pause = raw.get("pause_threshold")
        checked: list[tuple[str, Any]] = [("threshold", threshold), ("pause_threshold", pause)]
        if semantic is not None:
            checked += [("semantic threshold", semantic.threshold),
                        ("semantic pause_threshold", semantic.pause_threshold)]  # fmt: skip
        for name, value in checked:
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not 0.0 <= value <= 1.0
            ):
                raise ConfigError(f"{path}: {name} {value!r} is not in [0, 1]")
        bars = raw.get("scope_bars", {})
        if not isinstance(bars, dict) or any(
            k not in ("multi", "ood") or isinstance(v, bool) or not isinstance(v, int | float)
            for k, v in bars.items()
        ):
            raise ConfigError(f"{path}: scope_bars must map multi / ood to numbers")
        meta: dict[str, Any] = raw["meta"] if isinstance(raw.get("meta"), dict) else {}
        return cls(coef, intercept, threshold, ranker, vocabulary, familiarity, scope, dict(meta),
                   {k: float(v) for k, v in bars.items()},
                   None if pause is None else float(pause), tuple(names), semantic)  # fmt: skip


def fit_judge(
    x: Sequence[Sequence[float]], y: Sequence[int], *, c: float = 1.0
) -> tuple[list[float], float]:
    """Logistic weights and intercept for rows ``x`` labelled ``y`` (1: the fast path could
    answer). Fitted on standardised inputs, so the penalty treats every input alike, and
    returned in the inputs' own units (needs scikit-learn)."""
    from sklearn.linear_model import LogisticRegression

    a = np.asarray(x, dtype=np.float64)
    mu, sd = a.mean(axis=0), a.std(axis=0)
    sd[sd == 0] = 1.0
    model = LogisticRegression(C=c, max_iter=5000)
    model.fit((a - mu) / sd, list(y))
    w = model.coef_[0] / sd
    b = float(model.intercept_[0] - (w * mu).sum())
    return [float(v) for v in w], b


def reliability(p: Sequence[float], y: Sequence[int], bins: int = 10) -> list[dict[str, Any]]:
    """The reliability diagram's points: per equal-width bin of predicted probability, how
    many fell in it, their mean prediction and the share that were right."""
    out: list[dict[str, Any]] = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, v in enumerate(p) if lo <= v < hi or (b == bins - 1 and v == 1.0)]
        if idx:
            out.append({
                "bin": [round(lo, 3), round(hi, 3)],
                "n": len(idx),
                "mean_p": round(sum(p[i] for i in idx) / len(idx), 4),
                "right": round(sum(y[i] for i in idx) / len(idx), 4),
            })  # fmt: skip
    return out


def expected_calibration_error(p: Sequence[float], y: Sequence[int], bins: int = 10) -> float:
    """The mean gap between predicted and observed, weighted by each bin's share."""
    total = len(p)
    if not total:
        return 0.0
    gaps = (b["n"] / total * abs(b["mean_p"] - b["right"]) for b in reliability(p, y, bins))
    return float(sum(gaps))
