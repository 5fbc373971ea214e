"""Candidate suggestions: the corpus as a prefix index, and the list a user sees.

A suggestion is a whole query the customer may be typing (``"我想把积分兑换成话费"``) with
its intent. :class:`CandidatePool` holds the labelled queries (the training corpus plus
the templates' candidates), sorted by normalised text so the queries that extend a typed
prefix are one binary search away. :func:`fuse` mixes the classifier's intent
probabilities with what the extending queries say, and :meth:`CandidatePool.suggest`
builds the list: the top intents first (one suggestion each, so the first three cover
three intents), then more suggestions of the best intents.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rtgate.tiers.intents import Example
from rtgate.tiers.textnorm import lang_of, normalize

__all__ = ["CandidatePool", "Entry", "Suggestion", "fuse", "units"]


@dataclass(frozen=True, slots=True)
class Suggestion:
    """One candidate shown to the user: ``source`` says which tier produced it."""

    text: str
    intent: str
    source: str

    def to_dict(self) -> dict[str, str]:
        return {"text": self.text, "intent": self.intent, "source": self.source}

    @classmethod
    def from_dict(cls, d: Any, source: str | None = None) -> Suggestion:
        return cls(str(d["text"]), str(d["intent"]), source or str(d.get("source", "")))


@dataclass(frozen=True, slots=True)
class Entry:
    """A labelled query in the pool; ``key`` is its normalised text."""

    text: str
    intent: str
    lang: str
    key: str
    curated: bool = False


def units(text: str) -> int:
    """How much was typed: characters for Chinese, words (a partial one counts) for English."""
    norm = normalize(text)
    if not norm:
        return 0
    return len(norm.replace(" ", "")) if lang_of(norm) == "zh" else len(norm.split(" "))


def fuse(
    ranked: Sequence[tuple[str, float]], extending: Iterable[Entry], weight: float = 1.0
) -> list[tuple[str, float]]:
    """Intents re-ranked by ``log p(intent) + weight * log share(intent | extending queries)``.

    The share is smoothed, so an intent no known query continues is lowered, not removed.
    Returns ``(intent, score)`` pairs, best first (scores are log-domain, not probabilities).
    """
    counts = Counter(e.intent for e in extending)
    total = sum(counts.values())
    if not total or not weight:
        return [(i, math.log(p + 1e-4)) for i, p in ranked]
    k = len(ranked) or 1
    scored = [
        (i, math.log(p + 1e-4) + weight * math.log((counts[i] + 0.1) / (total + 0.1 * k)))
        for i, p in ranked
    ]
    return sorted(scored, key=lambda s: -s[1])


class CandidatePool:
    """Labelled queries indexed by normalised text (binary search on the sorted keys).

    ``extra`` are curated ``(text, intent)`` pairs (the templates' candidates): preferred
    as an intent's typical suggestion over corpus queries, which keep their typos.

    ``exclude`` intents (``complex`` by default) are kept for :meth:`nearest` but never
    offered as a completion: a long multi-part ask is not a suggestion.
    """

    def __init__(
        self,
        examples: Iterable[Example],
        extra: Iterable[tuple[str, str]] = (),
        *,
        exclude: Sequence[str] = ("complex",),
    ) -> None:
        seen: dict[str, Entry] = {}
        rows = [(t, i, True) for t, i in extra] + [(e.text, e.intent, False) for e in examples]
        for text, intent, curated in rows:
            key = normalize(text)
            if key and key not in seen:
                seen[key] = Entry(text, intent, lang_of(text), key, curated)
        self.all: tuple[Entry, ...] = tuple(seen.values())
        # an inverted index of character bigrams: similarity is counted from the postings
        # of the typed text's bigrams, not by a set intersection with every query
        grams = [_bigrams(e.key) for e in self.all]
        vocab: dict[str, list[int]] = {}
        for i, g in enumerate(grams):
            for b in g:
                vocab.setdefault(b, []).append(i)
        self._postings = {b: np.asarray(ix, dtype=np.int64) for b, ix in vocab.items()}
        self._sizes = np.asarray([len(g) for g in grams], dtype=np.float64)
        self._intent = np.asarray([e.intent for e in self.all], dtype=object)
        self.exclude = frozenset(exclude)
        shown = [e for e in self.all if e.intent not in self.exclude]
        self._entries = sorted(self.all, key=lambda e: e.key)
        self._keys = [e.key for e in self._entries]
        self._typical: dict[tuple[str, str], list[Entry]] = {}
        for e in sorted(shown, key=lambda e: (not e.curated, len(e.key))):
            self._typical.setdefault((e.intent, e.lang), []).append(e)

    def __len__(self) -> int:
        return len(self.all)

    def extensions(self, text: str) -> list[Entry]:
        """Queries that continue what was typed (not equal to it), shortest first; the
        excluded intents too (they count as evidence, :meth:`suggest` does not show them)."""
        q = normalize(text)
        if not q:
            return []
        lo = bisect.bisect_left(self._keys, q)
        hi = bisect.bisect_left(self._keys, q + "\U0010ffff")
        found = [e for e in self._entries[lo:hi] if e.key != q]
        return sorted(found, key=lambda e: len(e.key))

    def typical(self, intent: str, lang: str, k: int = 2) -> list[Entry]:
        """Typical queries of an intent in a language: curated ones (the templates'
        candidates) first, then the shortest."""
        return self._typical.get((intent, lang), [])[:k]

    def suggest(
        self,
        text: str,
        intents: Sequence[str],
        *,
        source: str,
        limit: int = 5,
        extending: Sequence[Entry] | None = None,
    ) -> list[Suggestion]:
        """Suggestions for ``text``: one per intent in ``intents`` order (a query that
        continues the text when there is one, else the intent's typical query; for an
        excluded intent, the most similar past ask), then the best intents' other
        continuations, up to ``limit``."""
        lang = lang_of(text)
        ext = self.extensions(text) if extending is None else extending
        by_intent: dict[str, list[Entry]] = {}
        for e in ext:
            if e.intent not in self.exclude:
                by_intent.setdefault(e.intent, []).append(e)
        lists = [
            self.nearest(text, 1, i)
            if i in self.exclude
            else by_intent.get(i) or self.typical(i, lang)
            for i in intents
        ]
        out: list[Suggestion] = []
        keys: set[str] = set()
        for row in range(max((len(x) for x in lists), default=0)):
            for entries in lists:
                if row < len(entries) and entries[row].key not in keys:
                    keys.add(entries[row].key)
                    out.append(Suggestion(entries[row].text, entries[row].intent, source))
                    if len(out) >= limit:
                        return out
        return out

    def similar(self, text: str, intent: str | None = None) -> list[tuple[float, Entry]]:
        """Every query (of ``intent`` only, when given) sharing character bigrams with
        ``text``, most similar first (cosine of the bigram sets): what a long ask most
        resembles."""
        grams = _bigrams(normalize(text))
        hits = [self._postings[b] for b in grams if b in self._postings]
        if not hits:
            return []
        shared = np.bincount(np.concatenate(hits), minlength=len(self.all))
        found = np.flatnonzero(shared)
        if intent is not None:
            found = found[self._intent[found] == intent]
        score = shared[found] / np.sqrt(len(grams) * self._sizes[found])
        order = np.argsort(-score, kind="stable")  # ties keep corpus order
        return [(float(score[j]), self.all[found[j]]) for j in order]

    def nearest(self, text: str, k: int = 3, intent: str | None = None) -> list[Entry]:
        """The ``k`` most similar queries (of ``intent`` only, when given)."""
        return [e for _, e in self.similar(text, intent)[:k]]


def _bigrams(s: str) -> set[str]:
    s = s.replace(" ", "_")
    return {s[i : i + 2] for i in range(len(s) - 1)}
