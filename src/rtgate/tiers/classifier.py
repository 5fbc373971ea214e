"""Intent classification on character n-grams, and the tier that answers with it.

:class:`IntentClassifier` needs no word segmentation: features are character 1–3-grams
inside each space-separated word (``char_wb``; a Chinese query is one "word"), plus whole
words for English, weighted by TF-IDF. A linear SVM is calibrated by temperature scaling
(:mod:`rtgate.tiers._linear`), so ``rank()`` returns honest probabilities. Training needs
scikit-learn (the ``ml`` extra); predicting and loading need only numpy and take tens of
microseconds. Models are saved as ``.npz`` without pickle (safe to load from anywhere).

:class:`ClassifierTier` answers when the top intent's probability reaches a threshold
(and the intent is not one that needs a bigger model, ``complex`` by default), with the
intent's canned reply and candidate queries from :class:`IntentAnswers`.
"""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.tiers._linear import FloatArray, LinearHead, fit_head, load_npz, save_npz
from rtgate.tiers.base import Tier
from rtgate.tiers.intents import Example, training_rows
from rtgate.tiers.templates import Candidate
from rtgate.tiers.textnorm import lang_of, normalize

__all__ = ["ClassifierTier", "IntentAnswers", "IntentClassifier", "IntentRanker", "char_ngrams"]

_FORMAT = "rtgate.intent-ngram/1"


class IntentRanker(Protocol):
    """What the classifier tier needs: intents with probabilities, best first."""

    classes: tuple[str, ...]
    blocking: bool
    """True when one call takes long enough (> ~1 ms) to run off the event loop."""

    def rank(self, text: str) -> list[tuple[str, float]]: ...


def char_ngrams(norm: str, lo: int = 1, hi: int = 3, words: bool = True) -> list[str]:
    """Character ``lo..hi``-grams of each space-padded word of a normalised text, plus
    the words themselves (marked with ``\\x01``) when there are several."""
    out: list[str] = []
    parts = norm.split(" ")
    for part in parts:
        w = f" {part} "
        size = len(w)
        for n in range(lo, hi + 1):
            if size < n:
                break
            out.extend(w[i : i + n] for i in range(size - n + 1))
    if words and len(parts) > 1:
        out.extend("\x01" + p for p in parts)
    return out


class IntentClassifier:
    """Character n-gram TF-IDF features and a calibrated linear head."""

    blocking = False

    def __init__(
        self,
        head: LinearHead,
        vocabulary: Sequence[str],
        idf: FloatArray,
        *,
        ngram: tuple[int, int] = (1, 3),
        words: bool = True,
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        if len(vocabulary) != head.coef.shape[0] or idf.shape != (len(vocabulary),):
            raise ValueError("vocabulary, idf and coefficients disagree in size")
        self.head = head
        self.classes = head.classes
        self.ngram = ngram
        self.words = words
        self.meta = dict(meta or {})
        self._vocab = {g: i for i, g in enumerate(vocabulary)}
        self._idf = idf
        self._max_idf = float(idf.max()) if len(idf) else 1.0
        self._recent: dict[str, tuple[np.ndarray[Any, np.dtype[np.intp]], FloatArray, float]] = {}

    @classmethod
    def train(
        cls,
        examples: Sequence[Example],
        *,
        ngram: tuple[int, int] = (1, 3),
        words: bool = True,
        prefix_weight: float = 0.0,
        model: str = "svc",
        c: float = 1.0,
        seed: int = 0,
    ) -> IntentClassifier:
        """Fit on labelled examples (needs scikit-learn). Deterministic for a ``seed``."""
        from sklearn.feature_extraction.text import TfidfVectorizer

        texts, labels, groups, weights = training_rows(examples, prefix_weight=prefix_weight)
        lo, hi = ngram

        def analyzer(text: str) -> list[str]:
            return char_ngrams(normalize(text), lo, hi, words)

        vec = TfidfVectorizer(analyzer=analyzer, sublinear_tf=True)
        x = vec.fit_transform(texts)
        head = fit_head(
            x, labels, groups=groups, sample_weight=weights, model=model, c=c, seed=seed
        )
        vocab = sorted(vec.vocabulary_, key=vec.vocabulary_.__getitem__)
        meta = {"n_examples": len(examples), "prefix_weight": prefix_weight, "model": model}
        return cls(head, vocab, np.asarray(vec.idf_, dtype=np.float64), ngram=ngram, words=words,
                   meta=meta)  # fmt: skip

    def features(self, text: str) -> tuple[np.ndarray[Any, np.dtype[np.intp]], FloatArray]:
        """Sparse TF-IDF row of ``text`` (sublinear tf, L2-normalised): indices, values."""
        ids, vals, _ = self._analysed(text)
        return ids, vals

    def known_share(self, text: str) -> float:
        """The share of ``text``'s n-grams (weighted by their IDF; one the vocabulary lacks
        weighs as much as its rarest) that the vocabulary has: 1.0 for an empty text."""
        return self._analysed(text)[2]

    @property
    def idf(self) -> FloatArray:
        """The inverse document frequency of each n-gram of the vocabulary."""
        return self._idf

    def _analysed(self, text: str) -> tuple[np.ndarray[Any, np.dtype[np.intp]], FloatArray, float]:
        """Features and known share of ``text``, computed once for the last few hundred
        texts (a judge reads one text through the ranking and the familiarity both)."""
        norm = normalize(text)  # memoised; a clause and its whole ask often read the same
        hit = self._recent.get(norm)
        if hit is not None:
            return hit
        counts = Counter(char_ngrams(norm, *self.ngram, self.words))
        get = self._vocab.get
        idx: list[int] = []
        tf: list[float] = []
        unseen = 0.0
        for gram, count in counts.items():
            j = get(gram)
            if j is not None:
                idx.append(j)
                tf.append(1.0 + math.log(count))
            else:
                unseen += 1.0 + math.log(count)
        ids = np.asarray(idx, dtype=np.intp)
        raw = np.asarray(tf, dtype=np.float64) * self._idf[ids]
        seen = float(raw.sum())
        total = seen + unseen * self._max_idf
        length = float(np.sqrt(raw @ raw))
        out = (ids, raw / length if length > 0 else raw, seen / total if total > 0 else 1.0)
        if len(self._recent) >= 256:  # bounded: the oldest goes
            self._recent.pop(next(iter(self._recent)))
        self._recent[norm] = out
        return out

    def proba(self, text: str) -> FloatArray:
        """Calibrated probabilities, in the order of ``classes``."""
        return self.head.proba_sparse(*self.features(text))

    def rank(self, text: str) -> list[tuple[str, float]]:
        """``(intent, probability)`` pairs, most likely first."""
        return self.head.rank(self.proba(text))

    def save(self, path: str | Path) -> None:
        """Write an ``.npz`` model file (no pickle)."""
        vocab = sorted(self._vocab, key=self._vocab.__getitem__)
        arrays = {**self.head.arrays(), "vocab": np.asarray(vocab, dtype=np.str_), "idf": self._idf}
        meta = {"ngram": list(self.ngram), "words": self.words, **self.meta}
        save_npz(path, _FORMAT, arrays, meta)

    @classmethod
    def load(cls, path: str | Path) -> IntentClassifier:
        """Read a file written by :meth:`save`; ``ConfigError`` if it is not one."""
        arrays, meta = load_npz(path, _FORMAT)
        head = LinearHead.from_arrays(arrays, str(path))
        lo, hi = (int(v) for v in meta.get("ngram", (1, 3)))
        vocab = [str(g) for g in arrays["vocab"].tolist()]
        return cls(head, vocab, np.asarray(arrays["idf"], dtype=np.float64), ngram=(lo, hi),
                   words=bool(meta.get("words", True)), meta=meta)  # fmt: skip


class IntentAnswers:
    """Canned replies per intent and language, and candidate queries to suggest.

    ``suggestions`` are clean phrasings (e.g. the template candidates); ``examples`` (the
    corpus) add more completions. Suggestions come first, then corpus queries, shortest
    first.
    """

    def __init__(
        self,
        replies: Mapping[str, Mapping[str, str]],
        examples: Sequence[Example] = (),
        suggestions: Sequence[Candidate] = (),
    ) -> None:
        self.replies = {k: dict(v) for k, v in replies.items()}
        pool: dict[tuple[str, str], list[Candidate]] = {}
        seen: set[str] = set()
        corpus = sorted(
            (Candidate(ex.text, ex.intent) for ex in examples), key=lambda c: len(c.key)
        )
        for cand in [*suggestions, *corpus]:
            if cand.key not in seen:
                seen.add(cand.key)
                pool.setdefault((cand.intent, lang_of(cand.text)), []).append(cand)
        self._pool = pool

    def reply(self, intent: str, lang: str) -> str | None:
        return self.replies.get(intent, {}).get(lang)

    def candidates(
        self,
        text: str,
        ranked: Sequence[tuple[str, float]],
        *,
        intents: int = 3,
        limit: int = 5,
        min_p: float = 0.02,
    ) -> list[Candidate]:
        """Suggestions for ``text`` from its top ``intents`` (those with p ≥ ``min_p``):
        queries that extend what was typed, else the intent's first suggestion,
        interleaved so that each intent shows early."""
        q, lang = normalize(text), lang_of(text)
        top = [k for k, p in ranked[:intents] if p >= min_p] or [k for k, _ in ranked[:1]]
        lists: list[list[Candidate]] = []
        for intent in top:
            pool = self._pool.get((intent, lang), [])
            fits = [c for c in pool if c.key.startswith(q) and c.key != q]
            lists.append(fits or pool[:1])
        out: list[Candidate] = []
        for row in range(max((len(x) for x in lists), default=0)):
            out.extend(x[row] for x in lists if row < len(x))
            if len(out) >= limit:
                break
        return out[:limit]


class ClassifierTier(Tier):
    """Answers with the top intent when its calibrated probability reaches ``threshold``.

    Declines when the probability is lower, when the intent is in ``decline_intents``
    (asks a small model should not answer), or when a blocking classifier would not fit
    the budget. The piece carries ``intent``, ``confidence``, the top intents and
    ``candidates``; its text is the intent's reply, else the first candidate.
    """

    def __init__(
        self,
        classifier: IntentRanker,
        answers: IntentAnswers | None = None,
        *,
        threshold: float = 0.5,
        decline_intents: Collection[str] = ("complex",),
        top_k: int = 3,
        max_candidates: int = 5,
        name: str = "classifier",
        quality: int = 20,
        blocking_ms: float = 15.0,
    ) -> None:
        self.classifier = classifier
        self.answers = answers or IntentAnswers({})
        self.threshold = threshold
        self.decline_intents = frozenset(decline_intents)
        self.top_k = top_k
        self.max_candidates = max_candidates
        self.name = name
        self.quality = quality
        self.blocking_ms = blocking_ms
        slow = classifier.blocking
        self.latency_prior = Prior(blocking_ms if slow else 1.0, blocking_ms if slow else 1.0)

    def classify(self, text: str) -> tuple[Piece | None, str]:
        """The answer piece, or ``None`` and the reason for declining (synchronous)."""
        ranked = self.classifier.rank(text)
        intent, p = ranked[0]
        if intent in self.decline_intents:
            return None, f"intent {intent!r} is left to a bigger model"
        if p < self.threshold:
            return None, f"confidence {p:.2f} < {self.threshold:.2f}"
        cands = self.answers.candidates(text, ranked, intents=self.top_k, limit=self.max_candidates)
        reply = self.answers.reply(intent, lang_of(text))
        data = {
            "source": "classifier",
            "intent": intent,
            "confidence": p,
            "intents": [{"intent": k, "p": v} for k, v in ranked[: self.top_k]],
            "reply": reply,
            "candidates": [{"text": c.text, "intent": c.intent, "source": "classifier"}
                           for c in cands],
        }  # fmt: skip
        text_out = reply or (cands[0].text if cands else intent)
        return Piece(text_out, data), ""

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        if self.classifier.blocking:
            if budget.left_ms() < self.blocking_ms:
                raise Declined(f"{self.name}: {budget.left_ms():.1f} ms left is too little")
            piece, why = await asyncio.to_thread(self.classify, request.input)
        else:
            piece, why = self.classify(request.input)
        if piece is None:
            raise Declined(f"{self.name}: {why}")
        yield piece
