"""Text normalisation shared by the fast tiers (templates, classifier, caches).

``normalize`` folds what a user may type differently but means the same: full-width and
half-width forms (NFKC: ``ＡＴＭ１２３，`` → ``atm123,``), letter case, runs of whitespace,
punctuation and symbols, spaces next to Chinese characters (``5 万`` → ``5万``) and
thousands separators (``50,000`` → ``50000``). It keeps decimal points and ``%``.
Apostrophes are dropped, so ``can't`` and ``cant`` are one key (the negation guard in
:mod:`rtgate.tiers._cache_signature` looks at both spellings).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache
from typing import Literal

__all__ = ["CJK", "Lang", "is_cjk", "lang_of", "normalize", "prefixes"]

Lang = Literal["zh", "en"]

CJK = "\u2e80-\u2fdf\u3040-\u30ff\u3100-\u31bf\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
"""Character ranges treated as Chinese-like (no spaces between words)."""

_APOSTROPHES = str.maketrans({"'": None, "\u2019": None, "\u2018": None, "`": None})
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
# Anything that is not a word character, whitespace, "%" or a decimal point between digits.
_PUNCT = re.compile(r"(?:[^\w\s%.]|_|(?<!\d)\.|\.(?!\d))+")
_SPACES = re.compile(r"\s+")
_CJK_SPACE = re.compile(rf"(?<=[{CJK}]) | (?=[{CJK}])")
_HAS_CJK = re.compile(rf"[{CJK}]")


def normalize(text: str) -> str:
    """The canonical form of ``text`` used as a lookup key (short texts are memoised)."""
    return _normalize_cached(text) if len(text) <= 256 else _normalize(text)


def _normalize(text: str) -> str:
    t = unicodedata.normalize("NFKC", text).casefold().translate(_APOSTROPHES)
    t = _THOUSANDS.sub("", t)
    t = _PUNCT.sub(" ", t)
    t = _SPACES.sub(" ", t).strip()
    return _CJK_SPACE.sub("", t)


_normalize_cached = lru_cache(maxsize=8192)(_normalize)


def is_cjk(ch: str) -> bool:
    """True for one character in the Chinese-like ranges."""
    return _HAS_CJK.match(ch) is not None


def lang_of(text: str) -> Lang:
    """``"zh"`` when ``text`` holds any Chinese-like character, else ``"en"``."""
    return "zh" if _HAS_CJK.search(text) else "en"


def prefixes(text: str, *, min_units: int = 2, include_full: bool = False) -> list[str]:
    """Normalised prefixes of ``text``, as a typing user produces them.

    Chinese text grows one character at a time, English one word at a time; a prefix
    has at least ``min_units`` characters (zh) or words (en). The full text itself is
    included only when ``include_full`` is true.
    """
    norm = normalize(text)
    if lang_of(norm) == "zh":
        stops = range(min_units, len(norm) + 1)
        out = [norm[:k] for k in stops]
    else:
        words = norm.split(" ")
        out = [" ".join(words[:k]) for k in range(min_units, len(words) + 1)]
    if not include_full and out and out[-1] == norm:
        out.pop()
    return out
