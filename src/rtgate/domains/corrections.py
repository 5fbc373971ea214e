"""Domain words put back where the recogniser likely mis-heard them (``花费`` → ``话费``,
``plant`` → ``plan``), from a list a user can replace (``corrections.json`` in a domain
folder).

A rule replaces ``heard`` by ``meant`` (Chinese: anywhere in the line; English: whole
words, any case) only where it helps: never when one of its ``block`` words is in the line
("花费了很多时间"), only when one of its ``context`` words is (when it lists any), and only
when the domain's classifier (``rank``) reads the corrected line as a confident ask of the
domain (``min_p``) and no less confidently than the line as heard (``margin`` below at
most: the classifier's character n-grams often read a mis-heard word right already, so
the words decide most cases and the classifier vetoes a correction that reads worse).
Without a classifier, the words alone decide. Pure text work and two classifier calls a rule.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rtgate.core.errors import ConfigError

__all__ = ["Corrections", "Fix", "Rule"]

Ranker = Callable[[str], Sequence[tuple[str, float]]]


@dataclass(frozen=True, slots=True)
class Rule:
    """One likely confusion: ``heard`` stands for ``meant`` in ``lang``."""

    lang: str
    heard: str
    meant: str
    context: tuple[str, ...] = ()
    block: tuple[str, ...] = ()

    def pattern(self) -> re.Pattern[str]:
        if self.lang == "zh":
            return re.compile(re.escape(self.heard))
        return re.compile(rf"(?<![\w'-]){re.escape(self.heard)}(?![\w'-])", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Fix:
    """A line after corrections, and the rules that fired (``heard→meant``)."""

    text: str
    applied: tuple[str, ...] = ()


def _has(line: str, words: Sequence[str], lang: str) -> bool:
    low = line.casefold()
    if lang == "zh":
        return any(w.casefold() in low for w in words)
    return any(re.search(rf"(?<![\w'-]){re.escape(w.casefold())}(?![\w'-])", low) for w in words)


class Corrections:
    """The rules of one domain; :meth:`apply` a line through them."""

    def __init__(self, rules: Sequence[Rule], *, min_p: float = 0.6, margin: float = 0.01) -> None:
        self.rules = tuple(rules)
        self.min_p, self.margin = min_p, margin
        self._patterns = [r.pattern() for r in self.rules]

    @classmethod
    def from_file(cls, path: Path) -> Corrections:
        """Rules from ``{"rules": [{"lang", "heard", "meant", "context"?, "block"?}]}``;
        ``ConfigError`` naming the rule for anything malformed. A missing file: no rules."""
        if not path.exists():
            return cls([])
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            rows = raw["rules"]
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise ConfigError(f"{path}: malformed corrections file: {e}") from e
        rules: list[Rule] = []
        for n, row in enumerate(rows, 1):
            try:
                lang, heard, meant = row["lang"], row["heard"], row["meant"]
                context = tuple(str(w) for w in row.get("context", ()))
                block = tuple(str(w) for w in row.get("block", ()))
            except (KeyError, TypeError, AttributeError) as e:
                raise ConfigError(f"{path}: rule {n}: {e}") from e
            ok = isinstance(heard, str) and heard and isinstance(meant, str)
            if lang not in ("zh", "en") or not ok:
                raise ConfigError(f"{path}: rule {n}: needs lang zh or en, heard and meant")
            rules.append(Rule(lang, heard, meant, context, block))
        return cls(rules)

    def apply(self, text: str, lang: str, rank: Ranker | None = None) -> Fix:
        """``text`` with every rule of ``lang`` that helps applied (see the module
        docstring); ``rank`` is the domain classifier."""
        out, applied = text, []
        for rule, pat in zip(self.rules, self._patterns, strict=True):
            if rule.lang != lang or not pat.search(out):
                continue
            if rule.block and _has(out, rule.block, lang):
                continue
            if rule.context and not _has(out, rule.context, lang):
                continue
            fixed = pat.sub(functools.partial(_replace, meant=rule.meant), out)
            fire = rank is None or self._helps(out, fixed, rank)
            if fire:
                out = fixed
                applied.append(f"{rule.heard}→{rule.meant}")
        return Fix(out, tuple(applied))

    def _helps(self, before: str, after: str, rank: Ranker) -> bool:
        p_after = rank(after)[0][1]
        return p_after >= self.min_p and p_after >= rank(before)[0][1] - self.margin


def _replace(m: re.Match[str], meant: str) -> str:
    return _cased(m.group(0), meant)


def _cased(heard: str, meant: str) -> str:
    """``meant`` in the case the recogniser wrote ``heard`` in (Plant → Plan)."""
    if heard.isupper() and len(heard) > 1:
        return meant.upper()
    if heard[:1].isupper():
        return meant[:1].upper() + meant[1:]
    return meant
