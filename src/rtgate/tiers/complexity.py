"""Signals that an ask is more than a fast tier can answer: several clauses, questions or
intents at once, conditions, numbers and dates, length, negation, words the domain never
uses. Chinese and English.

:func:`read_signals` is pure text work (regular expressions and set look-ups, tens of
microseconds); the intents of each clause come from any
:class:`~rtgate.tiers.classifier.IntentRanker` handed in. :class:`Vocabulary` is what the
domain's corpus says is ordinary (Chinese character bigrams, English words), so the share
of an ask that falls outside it is a measure of "out of domain".

None of these signals decides alone: :mod:`rtgate.tiers.answerability` weighs them, with
the fast tier's own confidence, into a calibrated probability that the fast answer is
right.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields

from rtgate.tiers.classifier import IntentRanker
from rtgate.tiers.textnorm import CJK, lang_of, normalize

__all__ = ["Signals", "Vocabulary", "clauses", "read_signals"]

# Clause boundaries: sentence and clause punctuation, and the words that join a second ask
# onto a first ("另外", "and also"). Kept apart from the normaliser, which drops punctuation.
_ZH_JOIN = "另外|同时|并且|而且|还有|以及|然后|顺便|再说|此外|再就是|还想|也想|另外还"
_EN_JOIN = r"and also|also|as well as|plus|additionally|besides|and then|then|on top of that"
_SPLIT = re.compile(rf"[，,；;。.!！?？\n]+|(?:{_ZH_JOIN})|\b(?:{_EN_JOIN})\b", re.IGNORECASE)
_QUESTION_MARK = re.compile(r"[?？]")
_ZH_QUESTION = re.compile(
    r"吗|么|怎么|怎样|什么|多少|多久|多长|能不能|可不可以|会不会|是不是|有没有|要不要|"
    r"是否|哪|为什么|为啥|如何|几|呢"
)
_EN_QUESTION = re.compile(
    r"^(?:how|what|why|when|where|which|who|can|could|will|would|is|are|do|does|did|should|"
    r"may|shall|am)\b"
)
_ZH_CONDITION = re.compile(r"如果|要是|假如|假设|万一|的话|除非|只要|一旦|否则|不然|前提|条件是")
_EN_CONDITION = re.compile(
    r"\b(?:if|unless|whether|otherwise|provided|assuming|in case|as long as|even though|"
    r"although|once|until|before|after)\b|(?<!^)\bwhen\b"
)
_ZH_COMPARE = re.compile(r"哪个更|哪种更|更划算|还是|对比|比较|区别|差别|分别")
_EN_COMPARE = re.compile(r"\b(?:which is|cheaper|better|compare|versus|vs|difference|or)\b")
_ZH_NEGATION = re.compile(r"不|没|别|未|无")
_EN_NEGATION = re.compile(r"\b(?:not|no|never|nor|dont|didnt|doesnt|cant|wont|isnt|wasnt)\b")
_NUMBER = re.compile(r"\d+(?:\.\d+)?|[两三四五六七八九十百千万]+(?=[笔张期个次天月年块元万千])")
_ZH_DATE = re.compile(
    r"[上下这本今明昨前后去][个]?(?:月|周|星期|年|天)|\d+[月号日]|周[一二三四五六日末]"
)
_EN_DATE = re.compile(
    r"\b(?:yesterday|today|tomorrow|tonight|last|next|this (?:month|week|year)|ago|"
    r"january|february|march|april|may|june|july|august|september|october|november|december|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|\d+(?:st|nd|rd|th))\b"
)
_CJK_RUN = re.compile(rf"[{CJK}]+")
_WORD = re.compile(r"[a-z][a-z']*")


def clauses(text: str) -> list[str]:
    """The parts of ``text`` between clause punctuation and joining words, stripped, each
    with something in it (the raw text: the caller normalises)."""
    return [p.strip() for p in _SPLIT.split(text) if p and p.strip(" ，,；;。.!！?？")]


class Vocabulary:
    """What a domain's corpus says is ordinary: Chinese character bigrams and English
    words seen at least ``min_count`` times."""

    def __init__(self, zh: Iterable[str], en: Iterable[str]) -> None:
        self.zh = frozenset(zh)
        self.en = frozenset(en)

    @classmethod
    def from_texts(cls, texts: Iterable[str], min_count: int = 1) -> Vocabulary:
        zh: dict[str, int] = {}
        en: dict[str, int] = {}
        for t in texts:
            norm = normalize(t)
            for gram in _zh_bigrams(norm):
                zh[gram] = zh.get(gram, 0) + 1
            for w in _WORD.findall(norm):
                en[w] = en.get(w, 0) + 1
        return cls(
            (g for g, n in zh.items() if n >= min_count),
            (w for w, n in en.items() if n >= min_count),
        )

    def unknown_share(self, norm: str) -> float:
        """The share of ``norm``'s bigrams (Chinese) or words (English) never seen."""
        if lang_of(norm) == "zh":
            grams = _zh_bigrams(norm)
            known = self.zh
        else:
            grams = _WORD.findall(norm)
            known = self.en
        if not grams:
            return 0.0
        return sum(1 for g in grams if g not in known) / len(grams)


def _zh_bigrams(norm: str) -> list[str]:
    out: list[str] = []
    for run in _CJK_RUN.findall(norm):
        out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


@dataclass(frozen=True, slots=True)
class Signals:
    """How complex an ask looks. Counts are whole numbers, shares in [0, 1]."""

    units: int  # characters (Chinese) or words (English)
    clauses: int  # parts with something in them
    questions: int  # clauses that ask something
    conditions: int  # "if", "unless", "如果" …
    comparisons: int  # "which is cheaper", "还是", "分别" …
    numbers: int  # amounts and counts
    dates: int  # "last month", "下个月", "3号" …
    negations: int
    intents: int  # distinct intents the clauses are confidently about
    unknown: float  # share of the ask the domain's corpus never uses
    zh: bool

    def features(self) -> list[float]:
        """A fixed-length vector for a linear model (counts are log-scaled)."""
        out = [math.log1p(self.units)]
        for f in fields(self)[1:-2]:
            out.append(math.log1p(float(getattr(self, f.name))))
        out.extend([self.unknown, 1.0 if self.zh else 0.0])
        return out

    def reasons(self) -> list[str]:
        """The signals worth naming in a trace, in words."""
        out: list[str] = []
        for name, n in (("clauses", self.clauses), ("questions", self.questions),
                        ("intents", self.intents)):  # fmt: skip
            if n > 1:
                out.append(f"{n} {name}")
        for name, n in (("condition", self.conditions), ("comparison", self.comparisons),
                        ("number", self.numbers), ("date", self.dates)):  # fmt: skip
            if n:
                out.append(f"{n} {name}{'s' if n > 1 else ''}")
        if self.unknown >= 0.5:
            out.append(f"{self.unknown:.0%} outside the domain's words")
        return out

    @staticmethod
    def names() -> list[str]:
        """The names of :meth:`features`, in order."""
        return ["log_units", *(f"log_{f.name}" for f in fields(Signals)[1:-2]), "unknown", "zh"]


def read_signals(
    text: str,
    *,
    vocabulary: Vocabulary | None = None,
    ranker: IntentRanker | None = None,
    intent_p: float = 0.5,
    ignore_intents: Sequence[str] = ("complex",),
) -> Signals:
    """The :class:`Signals` of ``text``. With a ``ranker``, each clause of at least three
    units is classified and the distinct intents reaching ``intent_p`` are counted."""
    norm = normalize(text)
    zh = lang_of(norm) == "zh"
    units = len(norm.replace(" ", "")) if zh else len(norm.split(" ")) if norm else 0
    parts = clauses(text.casefold())
    asked = 0
    for part in parts:
        p = normalize(part)
        if _QUESTION_MARK.search(part) or (
            _ZH_QUESTION.search(p) if lang_of(p) == "zh" else _EN_QUESTION.search(p)
        ):
            asked += 1
    if _QUESTION_MARK.search(text) and not asked:
        asked = 1
    found: set[str] = set()
    if ranker is not None:
        for part in parts:
            p = normalize(part)
            size = len(p.replace(" ", "")) if lang_of(p) == "zh" else len(p.split(" "))
            if size < 3:
                continue
            intent, prob = ranker.rank(p)[0]
            if prob >= intent_p and intent not in ignore_intents:
                found.add(intent)
    low = text.casefold()
    return Signals(
        units=units,
        clauses=len(parts),
        questions=asked,
        conditions=len((_ZH_CONDITION if zh else _EN_CONDITION).findall(norm)),
        comparisons=len((_ZH_COMPARE if zh else _EN_COMPARE).findall(norm)),
        numbers=len(_NUMBER.findall(low)),
        dates=len((_ZH_DATE if zh else _EN_DATE).findall(norm)),
        negations=len((_ZH_NEGATION if zh else _EN_NEGATION).findall(norm)),
        intents=len(found),
        unknown=vocabulary.unknown_share(norm) if vocabulary is not None else 0.0,
        zh=zh,
    )
