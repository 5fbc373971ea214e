"""Prefix and keyword templates: the fastest tier (a few microseconds per lookup).

A template table is a data file (JSON)::

    {"version": 1, "templates": [
      {"id": "zh.wo-xiang-ba", "kind": "prefix", "patterns": ["我想把"], "candidates": [
        {"text": "我想把积分兑换成话费", "intent": "points_exchange"}, ...]},
      {"id": "zh.kw.card-loss", "kind": "keyword", "patterns": ["挂失", "卡丢了"],
       "reply": "可在手机银行…立即冻结", "candidates": [...]}]}

Patterns and inputs are normalised (:func:`rtgate.tiers.textnorm.normalize`). Matching
runs one Aho-Corasick automaton (pyahocorasick, in C): prefix patterns are stored behind
a start sentinel so they only match at the start of the input.

* **prefix**: the input starts with a pattern; the candidates that extend what was typed
  are suggested (all of them when the input is exactly the pattern). The longest pattern
  with a fitting candidate wins.
* **keyword**: a pattern occurs anywhere in an input of at most ``max_keyword_chars``
  characters. When patterns of different intents occur (an ambiguous or multi-part ask)
  the table declines and leaves the request to a smarter tier.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import ahocorasick

from rtgate.core.budget import Budget
from rtgate.core.errors import ConfigError, Declined
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.tiers.base import Tier
from rtgate.tiers.textnorm import normalize

__all__ = ["Candidate", "Template", "TemplateMatch", "TemplateTable", "TemplateTier"]

TemplateKind = Literal["prefix", "keyword"]
_SENTINEL = "\x02"  # normalize() turns control characters into spaces: never in an input


@dataclass(frozen=True, slots=True)
class Candidate:
    """A suggestion: display ``text`` and its ``intent``; ``key`` is its normalised form."""

    text: str
    intent: str
    key: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", normalize(self.text))


@dataclass(frozen=True, slots=True)
class Template:
    """One template; ``patterns`` are normalised. ``intent`` defaults to the first
    candidate's."""

    id: str
    kind: TemplateKind
    patterns: tuple[str, ...]
    candidates: tuple[Candidate, ...]
    reply: str | None = None
    intent: str = ""

    def __post_init__(self) -> None:
        if not self.candidates or not self.patterns:
            raise ConfigError(f"template {self.id!r} needs patterns and candidates")
        if not self.intent:
            object.__setattr__(self, "intent", self.candidates[0].intent)


@dataclass(frozen=True, slots=True)
class TemplateMatch:
    """A hit: the template, the pattern that matched and the candidates that fit."""

    template: Template
    pattern: str
    candidates: tuple[Candidate, ...]

    @property
    def intent(self) -> str:
        if self.template.kind == "prefix":
            return self.candidates[0].intent
        return self.template.intent

    @property
    def text(self) -> str:
        """The reply when the template has one, else the first candidate."""
        return self.template.reply or self.candidates[0].text

    def to_data(self) -> dict[str, Any]:
        return {
            "source": "template",
            "template_id": self.template.id,
            "kind": self.template.kind,
            "pattern": self.pattern,
            "intent": self.intent,
            "reply": self.template.reply,
            "candidates": [
                {"text": c.text, "intent": c.intent, "source": "template"} for c in self.candidates
            ],
        }


class TemplateTable:
    """Templates compiled into one automaton. ``match`` is synchronous and pure."""

    def __init__(
        self,
        templates: Iterable[Template],
        *,
        max_candidates: int = 5,
        max_keyword_chars: int = 40,
    ) -> None:
        self.templates = tuple(templates)
        self.max_candidates = max_candidates
        self.max_keyword_chars = max_keyword_chars
        self._auto = ahocorasick.Automaton()
        seen: dict[str, str] = {}
        for index, tpl in enumerate(self.templates):
            for pattern in tpl.patterns:
                key = (_SENTINEL + pattern) if tpl.kind == "prefix" else pattern
                if key in seen:
                    raise ConfigError(
                        f"template {tpl.id!r}: pattern {pattern!r} already used by {seen[key]!r}"
                    )
                seen[key] = tpl.id
                self._auto.add_word(key, (index, pattern))
        if seen:
            self._auto.make_automaton()

    def __len__(self) -> int:
        return len(self.templates)

    def match(self, text: str) -> TemplateMatch | None:
        """The best template hit for ``text``, or ``None``."""
        q = normalize(text)
        if not q or not len(self.templates):
            return None
        prefix: list[tuple[int, str]] = []
        keyword: list[tuple[int, str]] = []
        for _end, (index, pattern) in self._auto.iter(_SENTINEL + q):
            (prefix if self.templates[index].kind == "prefix" else keyword).append((index, pattern))
        for index, pattern in sorted(prefix, key=lambda h: -len(h[1])):
            tpl = self.templates[index]
            if len(q) == len(pattern):
                fit = tpl.candidates
            else:
                fit = tuple(c for c in tpl.candidates if c.key.startswith(q))
            if fit:
                return TemplateMatch(tpl, pattern, fit[: self.max_candidates])
        if not keyword or len(q) > self.max_keyword_chars:
            return None
        if len({self.templates[i].intent for i, _ in keyword}) > 1:
            return None  # several intents asked at once: not a template's job
        index, pattern = min(keyword, key=lambda h: (-len(h[1]), h[0]))
        tpl = self.templates[index]
        return TemplateMatch(tpl, pattern, tpl.candidates[: self.max_candidates])

    # --- loading ----------------------------------------------------------------------

    @classmethod
    def from_file(
        cls, path: str | Path, *, intents: Collection[str] | None = None, **kwargs: Any
    ) -> TemplateTable:
        """Load a JSON template file; raise :class:`ConfigError` when it is malformed.

        ``intents``, when given, is the set of allowed intent ids.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(f"{path}: cannot read template file: {e}") from e
        return cls.from_dict(data, source=str(path), intents=intents, **kwargs)

    @classmethod
    def from_dict(
        cls,
        data: Any,
        *,
        source: str = "<templates>",
        intents: Collection[str] | None = None,
        **kwargs: Any,
    ) -> TemplateTable:
        """Build from parsed JSON (see the module docstring for the shape)."""
        if not isinstance(data, Mapping) or not isinstance(data.get("templates"), list):
            raise ConfigError(f"{source}: expected an object with a 'templates' list")
        if data.get("version", 1) != 1:
            raise ConfigError(f"{source}: unsupported version {data.get('version')!r}")
        ids: set[str] = set()
        out = []
        for n, raw in enumerate(data["templates"]):
            tpl = _parse_template(raw, f"{source}: templates[{n}]", intents)
            if tpl.id in ids:
                raise ConfigError(f"{source}: duplicate template id {tpl.id!r}")
            ids.add(tpl.id)
            out.append(tpl)
        return cls(out, **kwargs)


def _parse_template(raw: Any, where: str, intents: Collection[str] | None) -> Template:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where}: expected an object")
    tid, kind = raw.get("id"), raw.get("kind")
    if not isinstance(tid, str) or not tid:
        raise ConfigError(f"{where}: 'id' must be a non-empty string")
    where = f"{where} ({tid})"
    if kind not in ("prefix", "keyword"):
        raise ConfigError(f"{where}: 'kind' must be 'prefix' or 'keyword', got {kind!r}")
    patterns = raw.get("patterns")
    if not isinstance(patterns, list) or not patterns:
        raise ConfigError(f"{where}: 'patterns' must be a non-empty list")
    norm = []
    for p in patterns:
        if not isinstance(p, str) or not normalize(p):
            raise ConfigError(f"{where}: pattern {p!r} is empty after normalisation")
        norm.append(normalize(p))
    cands = raw.get("candidates")
    if not isinstance(cands, list) or not cands:
        raise ConfigError(f"{where}: 'candidates' must be a non-empty list")
    parsed = []
    for c in cands:
        if not (isinstance(c, Mapping) and isinstance(c.get("text"), str) and c["text"].strip()):
            raise ConfigError(f"{where}: every candidate needs a non-empty 'text'")
        intent = c.get("intent")
        if not isinstance(intent, str) or not intent:
            raise ConfigError(f"{where}: candidate {c['text']!r} needs an 'intent'")
        if intents is not None and intent not in intents:
            raise ConfigError(f"{where}: unknown intent {intent!r}")
        parsed.append(Candidate(c["text"], intent))
    reply, intent = raw.get("reply"), raw.get("intent", "")
    if reply is not None and not isinstance(reply, str):
        raise ConfigError(f"{where}: 'reply' must be a string")
    if not isinstance(intent, str) or (intent and intents is not None and intent not in intents):
        raise ConfigError(f"{where}: bad 'intent' {intent!r}")
    return Template(tid, cast(TemplateKind, kind), tuple(norm), tuple(parsed), reply, intent)


class TemplateTier(Tier):
    """Answers from a :class:`TemplateTable` with one :class:`Piece`; declines on a miss.

    The piece's text is the template's reply or its first candidate; its data holds
    ``template_id``, ``intent``, ``kind``, ``pattern`` and ``candidates``.
    """

    latency_prior = Prior(ttft_p99_ms=1.0, total_p99_ms=1.0)

    def __init__(self, table: TemplateTable, *, name: str = "template", quality: int = 10) -> None:
        self.table = table
        self.name = name
        self.quality = quality

    @classmethod
    def from_file(cls, path: str | Path, **kwargs: Any) -> TemplateTier:
        tier_keys = {"name", "quality"}
        table_kwargs = {k: v for k, v in kwargs.items() if k not in tier_keys}
        tier_kwargs = {k: v for k, v in kwargs.items() if k in tier_keys}
        return cls(TemplateTable.from_file(path, **table_kwargs), **tier_kwargs)

    def lookup(self, text: str) -> TemplateMatch | None:
        """Synchronous lookup (for callers that are not a gate)."""
        return self.table.match(text)

    instant = True  # a table lookup: the gate calls answer_now

    def answer_now(self, request: Request) -> Piece:
        hit = self.table.match(request.input)
        if hit is None:
            raise Declined(f"{self.name}: no template for this input")
        return Piece(hit.text, hit.to_data())

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        yield self.answer_now(request)
