"""Guards against semantic-cache false hits: negation, numbers and relative time.

Two texts can embed almost identically and still mean opposite things: "能退年费吗" and
"不能退年费吗" (cosine 0.99 with multilingual-e5-small), "分3期" and "分6期" (0.95),
"这个月的账单" and "上个月的账单" (0.98). A :class:`Signature` records what such pairs
differ in: the count of negation cues, the numbers (Arabic digits, Chinese numerals,
English number words; ``5万`` = ``五万`` = 50000) and relative-time markers. A semantic
hit requires equal signatures. Negations are compared by count, which is stricter than
parity ("没收到卡，不能激活" vs "收到卡，能激活" differ).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

__all__ = ["Signature", "compatible", "negation_count", "numbers", "signature", "time_marks"]


@dataclass(frozen=True, slots=True)
class Signature:
    """What must agree between a query and a cached query for a semantic hit."""

    negations: int
    numbers: tuple[float, ...]
    times: tuple[str, ...]


def _prep(text: str) -> str:
    t = unicodedata.normalize("NFKC", text).casefold()
    t = t.replace("\u2019", "'").replace("\u2018", "'")
    return re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", t)


# --- negation -------------------------------------------------------------------------

# A-not-A questions ask, they do not negate: 能不能, 是不是, 有没有, 可以不可以.
_A_NOT_A = re.compile(r"([\u4e00-\u9fff]{1,2})[不没]\1")
# Words that contain a negation character but do not negate.
_NOT_NEGATION = re.compile(
    "不过|不错|不少|不断|不久|不仅|不但|不管|不论|不然|无论|非常|是否|否则|要不|差不多"
    "|别的|别人|特别|区别|类别|级别|分别|识别|告别|未来"
)
_ZH_NEGATION = re.compile("[不没无未别勿莫非否甭]")
_EN_NEGATION = re.compile(
    r"n't\b|\b(?:not|no|never|cannot|none|nothing|nobody|neither|nor|without|unable"
    r"|cant|dont|wont|didnt|doesnt|isnt|arent|wasnt|werent|shouldnt|couldnt|wouldnt"
    r"|havent|hasnt|hadnt|aint)\b"
)


def negation_count(text: str) -> int:
    """How many negation cues ``text`` holds (Chinese and English)."""
    t = _prep(text)
    zh = _NOT_NEGATION.sub("", _A_NOT_A.sub("", t))
    return len(_ZH_NEGATION.findall(zh)) + len(_EN_NEGATION.findall(t))


# --- numbers --------------------------------------------------------------------------

_ZH_DIGIT = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5}
_ZH_DIGIT |= {"六": 6, "七": 7, "八": 8, "九": 9}
_ZH_UNIT = {"十": 10, "百": 100, "千": 1000}
_ZH_BIG = {"万": 10_000, "亿": 100_000_000}
_SUFFIX = {"k": 1000.0, "w": 10_000.0}
# "一" that is an article or an idiom, not a count.
_ZH_IDIOMS = re.compile(
    "一下|一点|一些|一起|一直|一样|一般|一定|一共|一旦|一切|一会|一边|一致|一律|一次性"
    "|统一|万一|唯一"
)
_NUMERAL = re.compile(r"(?:\d+(?:\.\d+)?|[零〇一二两三四五六七八九十百千万亿])+(?:[kw](?![a-z]))?")
_EN_WORD = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
    "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13,
    "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18,
    "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60,
    "seventy": 70, "eighty": 80, "ninety": 90,
}  # fmt: skip
_EN_SCALE = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
_EN_ANY = "|".join([*_EN_WORD, *_EN_SCALE])
_EN_RUN = re.compile(rf"\b(?:(?:{_EN_ANY})(?:[ -](?:and[ -])?(?={_EN_ANY}))?)+\b")


def _zh_value(run: str) -> float | None:
    """Value of a run mixing Arabic digits and Chinese numerals (``2万8`` → 28000)."""
    if not re.search(r"[\d零〇一二两三四五六七八九十]", run):
        return None  # units alone (百, 千万) are not numbers
    total = section = 0.0
    number: float | None = None
    last_unit = 1.0
    after_unit = saw_zero = False
    for tok in re.findall(r"\d+(?:\.\d+)?|.", run):
        if tok[0].isdigit():
            number, after_unit = float(tok), after_unit and not saw_zero
        elif tok in _ZH_DIGIT:
            saw_zero = saw_zero or _ZH_DIGIT[tok] == 0
            number, after_unit = float(_ZH_DIGIT[tok]), after_unit and not saw_zero
        elif tok in _ZH_UNIT:
            unit = _ZH_UNIT[tok]
            section += (1.0 if number is None else number) * unit
            number, last_unit, after_unit, saw_zero = None, unit, True, False
        else:  # 万, 亿
            unit = _ZH_BIG[tok]
            total = (total + section + (number or 0.0)) * unit
            section, number, last_unit, after_unit, saw_zero = 0.0, None, unit, True, False
    if number is not None and after_unit and last_unit >= 10:
        number *= last_unit / 10  # colloquial: 三千五 = 3500, 2万8 = 28000
    return total + section + (number or 0.0)


def _en_value(run: str) -> float:
    total = current = 0.0
    for word in re.split(r"[ -]+", run):
        if word in _EN_WORD:
            current += _EN_WORD[word]
        elif word in _EN_SCALE:
            scale = _EN_SCALE[word]
            current = max(current, 1.0) * scale
            if scale >= 1000:
                total, current = total + current, 0.0
    return total + current


def numbers(text: str) -> tuple[float, ...]:
    """The numbers in ``text``, sorted (digits, Chinese numerals, English words)."""
    t = _ZH_IDIOMS.sub(" ", _prep(text))
    found: list[float] = []
    for m in _NUMERAL.finditer(t):
        run = m.group()
        scale = _SUFFIX.get(run[-1], 1.0)
        value = _zh_value(run.rstrip("kw"))
        if value is not None:
            found.append(value * scale)
    found.extend(_en_value(m.group()) for m in _EN_RUN.finditer(t))
    return tuple(sorted(found))


# --- relative time --------------------------------------------------------------------

_TIME_MARKS: tuple[tuple[str, str], ...] = (
    ("这个月|本月|当月|这月|this month", "month+0"),
    ("上个月|上月|last month|previous month", "month-1"),
    ("下个月|下月|next month", "month+1"),
    ("本期|这期|当期|this statement|current statement", "period+0"),
    ("上期|last statement|previous statement", "period-1"),
    ("下期|next statement", "period+1"),
    ("今年|this year", "year+0"),
    ("去年|last year", "year-1"),
    ("明年|next year", "year+1"),
    ("今天|今日|today", "day+0"),
    ("昨天|昨日|yesterday", "day-1"),
    ("明天|明日|tomorrow", "day+1"),
    ("这周|本周|这个星期|this week", "week+0"),
    ("上周|上个星期|上星期|上礼拜|last week", "week-1"),
    ("下周|下个星期|下星期|next week", "week+1"),
)
_TIME = re.compile("|".join(f"(?P<t{i}>{pat})" for i, (pat, _) in enumerate(_TIME_MARKS)))


def time_marks(text: str) -> tuple[str, ...]:
    """Relative-time markers in ``text``, sorted (``上个月`` → ``month-1``)."""
    marks = [_TIME_MARKS[int((m.lastgroup or "t0")[1:])][1] for m in _TIME.finditer(_prep(text))]
    return tuple(sorted(marks))


def signature(text: str) -> Signature:
    """The :class:`Signature` of ``text``."""
    return Signature(negation_count(text), numbers(text), time_marks(text))


def compatible(a: str | Signature, b: str | Signature) -> bool:
    """True when the two texts agree in negation, numbers and relative time."""
    sa = a if isinstance(a, Signature) else signature(a)
    sb = b if isinstance(b, Signature) else signature(b)
    return sa == sb
