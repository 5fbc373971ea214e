"""A knowledge base a voice agent answers from first: entries per intent and language, the
intent classifier that picks one, and the judge that says when not to.

:meth:`KnowledgeBase.reply` reads a caller's finished turn (after the domain's ASR
corrections, :mod:`rtgate.domains.corrections`) and returns a :class:`Reply`:

- ``entry``: the classifier is confident of one intent (``min_confidence``), no clause of
  the turn is confidently about another intent, the judge (a
  :class:`~rtgate.tiers.answerability.CalibratedJudge` fitted on the domain's tuning calls,
  ``judge.json``) trusts the fast path, and the domain's semantic reader, when it ships one
  (``scope-e5.npz`` through its tuned encoder), does not read the turn as multi-part or
  outside the domain (its pause bar): the entry's own reply is the answer, and no
  follow-up is asked for;
- ``hold``: anything else (unknown, multi-part, low confidence): a short honest holding
  answer at once, naming the topics it did recognise ("关于话费账单和套餐变更，我帮您查一下"),
  and ``followup=True``: the big model answers after.

Also here: :meth:`KnowledgeBase.on_topic` (is an answer about a topic?), the check a local
model's phrasing of an entry must pass (:meth:`KnowledgeBase.phrasing_ok`) and the
measure of how much a follow-up repeats what was said (:func:`repeat_share`).

A domain folder holds ``intents.json`` (entries, holding answers), ``corpus.jsonl`` (the
phrasings the classifier learns), ``corrections.json``, and the trained ``intent-ngram.npz``,
``scope-ngram.npz`` and ``judge.json`` (``rtgate voice kb build``); optionally the semantic
reader ``scope-e5.npz`` + ``scope-e5-adapter.npz`` (``rtgate intents scope-tune --data-dir``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from rtgate.core.errors import ConfigError
from rtgate.core.request import Request
from rtgate.domains.corrections import Corrections, Fix
from rtgate.domains.loader import (
    TELECOM_DIR,
    judge_path,
    load_classifier,
    load_judge,
    load_semantic_scope,
    semantic_scope_path,
)
from rtgate.tiers.answerability import Judge
from rtgate.tiers.classifier import IntentRanker
from rtgate.tiers.complexity import clauses
from rtgate.tiers.semantic_scope import SemanticScope
from rtgate.tiers.textnorm import lang_of, normalize

__all__ = [
    "Entry",
    "KnowledgeBase",
    "Reply",
    "read_entries",
    "repeat_share",
    "shipped",
    "units",
]

ReplyKind = Literal["entry", "hold"]
_NUMBER = re.compile(r"\d+(?:[.:]\d+)?")
_EN_WORD = re.compile(r"[a-z0-9][a-z0-9'-]*")
_SENT = re.compile(r"(?<=[。！？!?；;])|(?<=\.)\s+")


@dataclass(frozen=True, slots=True)
class Entry:
    """What the domain says about one intent in one language."""

    intent: str
    lang: str
    label: str
    topic: str  # how a holding answer names it
    reply: str  # the answer, spoken as is
    keywords: tuple[str, ...] = ()
    followup: bool = False  # the big model follows this entry up anyway


@dataclass(frozen=True, slots=True)
class Reply:
    """The first answer to a turn and whether the big model follows it up."""

    kind: ReplyKind
    text: str
    followup: bool
    heard: str  # the turn after the domain's corrections
    intent: str | None = None  # the entry answered from (``entry``)
    topics: tuple[str, ...] = ()  # the intents a holding answer names
    confidence: float = 0.0  # the classifier's top probability
    p_right: float | None = None  # the judge's
    why: str = ""
    corrections: tuple[str, ...] = ()
    p_out: float | None = None  # the semantic reader's: multi-part or outside the domain

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "intent": self.intent,
            "topics": list(self.topics),
            "confidence": round(self.confidence, 4),
            "p_right": None if self.p_right is None else round(self.p_right, 4),
            "p_out": None if self.p_out is None else round(self.p_out, 4),
            "followup": self.followup,
            "why": self.why,
            "heard": self.heard,
            "corrections": list(self.corrections),
        }


def units(text: str, lang: str | None = None) -> list[str]:
    """The units an overlap is counted in: Chinese character bigrams, English words."""
    norm = normalize(text)
    if (lang or lang_of(norm)) == "zh":
        s = norm.replace(" ", "")
        return [s[i : i + 2] for i in range(len(s) - 1)] or ([s] if s else [])
    return _EN_WORD.findall(norm)


def repeat_share(line: str, said: Sequence[str], lang: str | None = None) -> float:
    """The share of ``line``'s units (bigrams or words) already in ``said``: 1.0 when it
    says nothing new, 0.0 when it shares nothing."""
    mine = units(line, lang)
    if not mine:
        return 1.0
    before = {u for s in said for u in units(s, lang)}
    return sum(u in before for u in mine) / len(mine)


@dataclass(slots=True)
class KnowledgeBase:
    """Entries, the classifier that picks one, and when to hold (module docstring)."""

    entries: dict[tuple[str, str], Entry]
    holding: dict[str, dict[str, str]]
    classifier: IntentRanker
    judge: Judge | None = None
    corrections: Corrections = field(default_factory=lambda: Corrections([]))
    semantic: SemanticScope | None = None  # the tuned reader; holds at its pause bar
    min_confidence: float = 0.5  # the classifier's top probability to answer from an entry
    clause_confidence: float = 0.6  # a clause this sure of another intent makes it multi-part
    name_confidence: float | None = None  # a hold names the turn's intent this sure of it
    # (``None``: clause_confidence)
    max_topics: int = 2  # topics a holding answer names

    # -- loading -------------------------------------------------------------------------

    @classmethod
    def load(cls, data_dir: Path, *, judge: bool = True) -> KnowledgeBase:
        """The domain in ``data_dir`` (its classifier retrained in memory when stale; its
        judge and its semantic reader when it has them and ``judge``); ``ConfigError`` when
        it is malformed."""
        entries, holding, tuned = read_entries(data_dir / "intents.json")
        clf = load_classifier("ngram", data_dir=data_dir)
        fitted = load_judge(data_dir) if judge and judge_path(data_dir).exists() else None
        reader = None
        if judge and semantic_scope_path(data_dir).exists():
            reader = load_semantic_scope(data_dir)
        kb = cls(entries, holding, clf, fitted,
                 Corrections.from_file(data_dir / "corrections.json"), semantic=reader)  # fmt: skip
        if fitted is not None:  # the thresholds chosen with the judge (meta["picked_on"])
            for name in ("min_confidence", "clause_confidence", "name_confidence"):
                value = fitted.meta.get(name, tuned.get(name))
                if isinstance(value, int | float):
                    setattr(kb, name, float(value))
        return kb

    # -- the decision --------------------------------------------------------------------

    def correct(self, text: str, lang: str) -> Fix:
        """``text`` through the domain's ASR corrections."""
        return self.corrections.apply(text, lang, self.classifier.rank)

    def reply(self, text: str, lang: str | None = None) -> Reply:
        """The first answer to a caller's finished turn ``text`` (see the module docstring)."""
        lang = lang or lang_of(text)
        fix = self.correct(text, lang)
        heard = fix.text
        intent, p = self.classifier.rank(heard)[0] if heard.strip() else ("", 0.0)
        others = [k for k in self.clause_intents(heard) if k != intent]
        verdict = self.judge.judge(Request(input=heard, meta={"lang": lang}), None) if (
            self.judge is not None) else None  # fmt: skip
        p_out = self.semantic.out_of_scope(heard) if self.semantic and heard.strip() else None
        entry = self.entries.get((intent, lang))
        reasons: list[str] = []
        if entry is None:
            reasons.append(f"no entry for {intent!r}" if intent else "nothing heard")
        if p < self.min_confidence:
            reasons.append(f"confidence {p:.2f} < {self.min_confidence:.2f}")
        if others:
            reasons.append(f"clauses also about {', '.join(others)}")
        if verdict is not None and not verdict.answerable:
            reasons.append(f"judge {verdict.why()}")
        if (
            p_out is not None
            and self.semantic is not None
            and self.semantic.vetoes(p_out, pause=True)
        ):
            reasons.append(f"reads multi-part or outside ({p_out:.2f})")
        p_right = None if verdict is None else verdict.p_right
        if entry is not None and not reasons:
            why = f"{intent} p={p:.2f}" + ("" if verdict is None else f"; judge {verdict.why()}")
            return Reply("entry", entry.reply, entry.followup, heard, intent, (intent,), p,
                         p_right, why, fix.applied, p_out)  # fmt: skip
        # a holding answer names only what it is sure of: the whole turn's intent at
        # name_confidence, a clause's at clause_confidence, and nothing when the turn reads
        # as outside the domain
        topics: list[str] = []
        outside = self.reads_outside(heard, verdict)
        named = self.clause_confidence if self.name_confidence is None else self.name_confidence
        sure = [intent] if p >= named else []
        for k in [] if outside else sure + others:
            if k not in topics and (k, lang) in self.entries:
                topics.append(k)
        topics = topics[: self.max_topics]
        return Reply("hold", self.holding_text(lang, topics), True, heard, None, tuple(topics),
                     p, p_right, "; ".join(reasons), fix.applied, p_out)  # fmt: skip

    def reads_outside(self, text: str, verdict: Any = None) -> bool:
        """Whether a held turn reads more as outside the domain than as several asks of
        it: the semantic reader, when there is one, puts more on ``ood`` than on either
        ``multi`` or ``simple`` (a turn it reads as one ask of the domain, held for another
        reason, is named); else the judge's scope classifier (simple / multi / ood) puts
        more on ``ood`` than on ``multi`` (without one: the judge's reasons say
        out-of-domain)."""
        if self.semantic is not None:
            read = self.semantic.proba(text)
            return read.get("ood", 0.0) >= max(read.get("multi", 0.0), read.get("simple", 0.0))
        scope: IntentRanker | None = getattr(self.judge, "scope", None)
        if scope is None:
            return verdict is not None and _ood(verdict)
        kinds = dict(scope.rank(text))
        return kinds.get("ood", 0.0) >= kinds.get("multi", 0.0)

    def clause_intents(self, text: str) -> list[str]:
        """The intents the clauses of ``text`` (three units or more) are confidently about,
        in order of appearance."""
        found: list[str] = []
        for part in clauses(text):
            if len(units(part)) < 2:
                continue
            intent, p = self.classifier.rank(part)[0]
            if p >= self.clause_confidence and intent not in found:
                found.append(intent)
        return found

    def holding_text(self, lang: str, topics: Sequence[str] = ()) -> str:
        """The holding answer in ``lang``, naming ``topics`` when there are any."""
        h = self.holding.get(lang) or self.holding.get("en") or {}
        names = [self.entries[(k, lang)].topic for k in topics if (k, lang) in self.entries]
        if names and "topics" in h:
            return h["topics"].replace("{topics}", h.get("join", ", ").join(names))
        return h.get("plain", "")

    def entry(self, intent: str, lang: str) -> Entry | None:
        return self.entries.get((intent, lang))

    @property
    def intents(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for k, _ in self.entries))

    # -- checks --------------------------------------------------------------------------

    def on_topic(self, answer: str, topic: str | Sequence[str] | None, lang: str) -> bool:
        """Whether ``answer`` (what the agent said first) is about ``topic``: an intent id,
        several (a multi-part ask: any of them), or ``None`` / ``"ood"`` (outside the
        domain). An answer is on an intent's topic when it is that entry's reply, a
        holding answer naming it, or it scores at least as high on that intent as on any other
        (and above zero): one point a keyword of the intent it uses, one more when the
        domain's classifier reads the answer as that intent (p >= 0.5). For ``ood`` only a
        holding answer that names no topic is on topic (the agent did not pretend it knew)."""
        said = normalize(answer)
        if not said:
            return False
        wanted = [topic] if isinstance(topic, str) else list(topic or [])
        wanted = [t for t in wanted if t != "ood"]
        if not wanted:
            return said == normalize(self.holding_text(lang))
        for k in wanted:
            e = self.entries.get((k, lang))
            if e is not None and (normalize(e.reply) in said or normalize(e.topic) in said):
                return True
        hits = {k: self._keyword_hits(said, k, lang) for k in self.intents}
        top, p = self.classifier.rank(answer)[0]
        if p >= 0.5 and top in hits:
            hits[top] += 1  # the classifier's reading of the answer counts as one keyword
        best = max(hits.values(), default=0)
        return best > 0 and any(hits.get(k, 0) == best for k in wanted)

    def _keyword_hits(self, said: str, intent: str, lang: str) -> int:
        e = self.entries.get((intent, lang))
        if e is None:
            return 0
        if lang == "zh":
            return sum(normalize(w) in said for w in e.keywords)
        words = f" {said} "
        return sum(f" {normalize(w)} " in words for w in e.keywords)

    def phrasing_ok(self, candidate: str, intent: str, lang: str) -> bool:
        """Whether a local model's phrasing of ``intent``'s entry may be spoken instead of
        the entry's own text: it keeps every number of the entry and adds none, reads as
        the same intent to the classifier, says no sentence twice and is not much longer."""
        e = self.entries.get((intent, lang))
        text = candidate.strip()
        if e is None or not text:
            return False
        if sorted(_NUMBER.findall(text)) != sorted(_NUMBER.findall(e.reply)):
            return False
        if len(units(text, lang)) > 1.5 * max(1, len(units(e.reply, lang))):
            return False
        sentences = [normalize(s) for s in _SENT.split(text) if normalize(s)]
        if len(set(sentences)) < len(sentences):
            return False
        top, p = self.classifier.rank(text)[0]
        return top == intent and p >= self.min_confidence


def _ood(verdict: Any) -> bool:
    """The judge's scope classifier reads the turn as outside the domain (the share of
    words the corpus never uses is no sign alone: callers say much a corpus does not)."""
    return any("out-of-domain" in r for r in getattr(verdict, "reasons", ()))


def read_entries(
    path: Path,
) -> tuple[dict[tuple[str, str], Entry], dict[str, dict[str, str]], dict[str, Any]]:
    """Entries, holding answers and optional ``tuning`` values from an ``intents.json``
    (see ``domains/telecom/intents.json``); ``ConfigError`` naming what is wrong."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        intents = raw["intents"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ConfigError(f"{path}: malformed intents file: {e}") from e
    entries: dict[tuple[str, str], Entry] = {}
    for intent, langs in intents.items():
        if not isinstance(langs, dict):
            raise ConfigError(f"{path}: {intent}: expected languages")
        for lang, v in langs.items():
            if not isinstance(v, dict) or "reply" not in v:
                continue  # an intent without a reply (left to the big model)
            reply = v["reply"]
            if lang not in ("zh", "en") or not isinstance(reply, str) or not reply.strip():
                raise ConfigError(f"{path}: {intent}.{lang}: needs a reply in zh or en")
            entries[(intent, lang)] = Entry(
                intent,
                lang,
                str(v.get("label", intent)),
                str(v.get("topic", v.get("label", intent))),
                reply.strip(),
                tuple(str(w) for w in v.get("keywords", ())),
                bool(v.get("followup", False)),
            )
    holding = raw.get("holding", {})
    if not isinstance(holding, dict):
        raise ConfigError(f"{path}: 'holding' must map a language to its answers")
    tuning = raw.get("tuning", {})
    return entries, holding, tuning if isinstance(tuning, dict) else {}


@lru_cache(maxsize=4)
def shipped(data_dir: Path = TELECOM_DIR) -> KnowledgeBase:
    """The knowledge base in ``data_dir``, loaded once per process."""
    return KnowledgeBase.load(data_dir)
