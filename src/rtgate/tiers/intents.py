"""Labelled intent examples: loading JSONL, a deterministic held-out split, evaluation.

A corpus is JSON Lines, one example per line: ``{"text": ..., "intent": ..., "lang": ...}``
(``lang`` optional: ``zh`` or ``en``, guessed from the text when absent). Blank lines and
lines starting with ``#`` are skipped; anything else malformed raises
:class:`~rtgate.core.errors.ConfigError` naming the file and line.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtgate.core.errors import ConfigError
from rtgate.tiers.textnorm import lang_of, prefixes

__all__ = [
    "Example",
    "evaluate",
    "holdout_split",
    "load_examples",
    "parse_examples",
    "training_rows",
]


@dataclass(frozen=True, slots=True)
class Example:
    """One labelled query."""

    text: str
    intent: str
    lang: str = "zh"


def load_examples(path: str | Path, *, intents: Collection[str] | None = None) -> list[Example]:
    """Read a JSONL corpus. ``intents``, when given, is the set of allowed labels."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read corpus: {e}") from e
    return parse_examples(lines, source=str(path), intents=intents)


def parse_examples(
    lines: Iterable[str], *, source: str = "<corpus>", intents: Collection[str] | None = None
) -> list[Example]:
    """Parse JSONL lines (see the module docstring); raise ``ConfigError`` on bad lines."""
    out: list[Example] = []
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            row: Any = json.loads(s)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{source}:{n}: not valid JSON ({e.msg})") from e
        if not isinstance(row, dict):
            raise ConfigError(f"{source}:{n}: expected an object, got {type(row).__name__}")
        text, intent = row.get("text"), row.get("intent")
        if not isinstance(text, str) or not text.strip():
            raise ConfigError(f"{source}:{n}: 'text' must be a non-empty string")
        if not isinstance(intent, str) or not intent:
            raise ConfigError(f"{source}:{n}: 'intent' must be a non-empty string")
        if intents is not None and intent not in intents:
            raise ConfigError(f"{source}:{n}: unknown intent {intent!r}")
        lang = row.get("lang") or lang_of(text)
        if lang not in ("zh", "en"):
            raise ConfigError(f"{source}:{n}: 'lang' must be 'zh' or 'en', got {lang!r}")
        out.append(Example(text.strip(), intent, lang))
    if not out:
        raise ConfigError(f"{source}: no examples")
    return out


def holdout_split(
    examples: Sequence[Example], *, test_fraction: float = 0.2, salt: str = "rtgate"
) -> tuple[list[Example], list[Example]]:
    """Split into (train, test), stratified by intent and independent of file order.

    Within each intent, examples are ordered by a hash of their text and every
    ``1/test_fraction``-th one is held out, so the same corpus always gives the same split
    and adding an example moves few others.
    """
    if not 0 < test_fraction < 1:
        raise ValueError("test_fraction must be in (0, 1)")
    by_intent: dict[str, list[Example]] = defaultdict(list)
    for ex in examples:
        by_intent[ex.intent].append(ex)
    train: list[Example] = []
    test: list[Example] = []
    for intent in sorted(by_intent):
        group = sorted(by_intent[intent], key=lambda e: _digest(salt, e.text))
        n_test = max(1, round(len(group) * test_fraction)) if len(group) > 1 else 0
        stride = len(group) / n_test if n_test else 0.0
        picks = {int(i * stride) for i in range(n_test)}
        for i, ex in enumerate(group):
            (test if i in picks else train).append(ex)
    return train, test


def training_rows(
    examples: Sequence[Example], *, prefix_weight: float = 0.0, min_prefix_units: int = 2
) -> tuple[list[str], list[str], list[int], list[float]]:
    """Rows to fit on: ``(texts, labels, groups, weights)``.

    With ``prefix_weight > 0`` every prefix of every example is added with that weight
    (it teaches the model what a half-typed query of each intent looks like); a prefix
    shares its source example's group so calibration folds keep them together.
    """
    texts, labels, groups, weights = [], [], [], []
    for g, ex in enumerate(examples):
        texts.append(ex.text)
        labels.append(ex.intent)
        groups.append(g)
        weights.append(1.0)
        if prefix_weight > 0:
            for p in prefixes(ex.text, min_units=min_prefix_units):
                texts.append(p)
                labels.append(ex.intent)
                groups.append(g)
                weights.append(prefix_weight)
    return texts, labels, groups, weights


def _digest(salt: str, text: str) -> bytes:
    return hashlib.blake2b(f"{salt}\x00{text}".encode(), digest_size=8).digest()


Ranker = Callable[[str], Sequence[tuple[str, float]]]
"""A function from text to ``(intent, probability)`` pairs, best first."""


def evaluate(
    rank: Ranker, test: Sequence[Example], *, k: int = 3, min_prefix_units: int = 2
) -> dict[str, Any]:
    """Accuracy on full queries and top-``k`` accuracy on their prefixes.

    Prefixes are what a typing user sends: Chinese grows by characters, English by words;
    each has at least ``min_prefix_units`` of them and is shorter than the full query.
    """
    full_hits = full_topk = 0
    pre_total = pre_topk = pre_top1 = 0
    for ex in test:
        ranked = [intent for intent, _ in rank(ex.text)]
        full_hits += bool(ranked) and ranked[0] == ex.intent
        full_topk += ex.intent in ranked[:k]
        for p in prefixes(ex.text, min_units=min_prefix_units):
            got = [intent for intent, _ in rank(p)]
            pre_total += 1
            pre_top1 += bool(got) and got[0] == ex.intent
            pre_topk += ex.intent in got[:k]
    n = max(1, len(test))
    return {
        "n_queries": len(test),
        "query_accuracy": full_hits / n,
        f"query_top{k}": full_topk / n,
        "n_prefixes": pre_total,
        "prefix_top1": pre_top1 / max(1, pre_total),
        f"prefix_top{k}": pre_topk / max(1, pre_total),
    }
