"""Typing sessions for the benchmark: what a suggestion box receives while someone types.

English is sent keystroke by keystroke. Chinese arrives the way a pinyin IME commits it:
a word or short phrase at a time (``我想`` ``把`` ``积分`` ``兑换`` …), found by longest
match against the frequent 2–4 character strings of the corpus, with digits and Latin
words committed whole and punctuation committed with the chunk before it. Long-tail
complex asks (multi-condition, not in the corpus) are mixed in at a stated share.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from rtgate.tiers.textnorm import CJK, lang_of

__all__ = ["LONG_TAIL", "Keystroke", "Session", "chunks", "lexicon", "sessions", "typed"]

LONG_TAIL: tuple[str, ...] = (
    "我想把跨境手续费按 SWIFT 退款政策重新计息",
    "上个月在香港刷的两笔港币消费退款了，但汇率差和货币转换费没退，能不能按原汇率补给我",
    "我的分期还有8期没还，想提前结清同时把剩下的额度转成账单分期，手续费怎么算比较划算",
    "副卡在国外被盗刷了三笔，主卡这边能不能先冻结副卡，盗刷的钱多久能退回来，年费还要交吗",
    "我想把积分换成里程，但是航空公司会员名字和信用卡不一致，能不能先改名字再兑换，积分会过期吗",
    "自动还款失败导致逾期一天，能不能帮我撤销逾期记录并且退掉违约金，以后换一张还款卡",
    "公司报销的差旅费先用我信用卡垫付了，额度不够想临时提额，同时把机票那笔分3期可以吗",
    "我想了解一下如果我现在销户，剩下的积分、未出账分期和已经交的年费分别怎么处理",
    "I was charged twice at a hotel abroad and the deposit hold is still there, can you reverse "
    "both and waive the foreign transaction fee",
    "I want to move my balance to installments, raise my limit for a trip next month and make "
    "sure autopay still takes the minimum",
    "My card was stolen on holiday, can you freeze it, send a replacement to my hotel and dispute "
    "the three charges from yesterday",
    "If I pay only the minimum this month and clear the rest next month, how is the interest "
    "calculated and will it affect my credit score",
)
_PUNCT = "，。！？、；：,.!?;: "
_TOKEN = re.compile(rf"[{CJK}]+|[0-9.]+|[A-Za-z']+|[^{CJK}0-9A-Za-z']")


@dataclass(frozen=True, slots=True)
class Keystroke:
    """One request of a session: the text so far and the pause before the next one."""

    prefix: str
    gap_ms: float


@dataclass(frozen=True, slots=True)
class Session:
    """One person typing one query (``intent`` is its label, ``""`` for long-tail asks)."""

    query: str
    intent: str
    keys: tuple[Keystroke, ...]


def lexicon(texts: Iterable[str], min_count: int = 3) -> frozenset[str]:
    """Chinese strings of 2-4 characters seen at least ``min_count`` times: the words an
    IME would commit in one go."""
    counts: Counter[str] = Counter()
    for t in texts:
        for run in re.findall(rf"[{CJK}]+", t):
            for n in (2, 3, 4):
                counts.update(run[i : i + n] for i in range(len(run) - n + 1))
    return frozenset(w for w, c in counts.items() if c >= min_count)


def chunks(text: str, lex: frozenset[str]) -> list[str]:
    """The pieces in which ``text`` arrives: IME commits for Chinese, characters else."""
    if lang_of(text) == "en":
        return list(text)
    out: list[str] = []
    for tok in _TOKEN.findall(text):
        if tok in _PUNCT and out:
            out[-1] += tok
        elif re.fullmatch(rf"[{CJK}]+", tok):
            i = 0
            while i < len(tok):
                n = next((k for k in (4, 3, 2) if tok[i : i + k] in lex), 1)
                out.append(tok[i : i + n])
                i += n
        else:
            out.append(tok)
    return out


def typed(text: str, lex: frozenset[str], rng: random.Random) -> tuple[Keystroke, ...]:
    """The successive prefixes of ``text`` with human-like pauses (ms) after each."""
    zh = lang_of(text) == "zh"
    out = []
    prefix = ""
    for piece in chunks(text, lex):
        prefix += piece
        gap = rng.uniform(250.0, 700.0) if zh else rng.uniform(60.0, 220.0)
        out.append(Keystroke(prefix, gap))
    return tuple(out)


def sessions(
    queries: Sequence[tuple[str, str]],
    n_requests: int,
    *,
    long_tail: float = 0.05,
    seed: int = 0,
    lex: frozenset[str] | None = None,
) -> Iterator[Session]:
    """Sessions until ``n_requests`` keystrokes: the ``(text, intent)`` queries in shuffled
    rounds, a long-tail complex ask instead with probability ``long_tail``."""
    rng = random.Random(seed)
    lex = lex if lex is not None else lexicon(t for t, _ in queries)
    left = n_requests
    order: list[tuple[str, str]] = []
    while left > 0:
        if not order:
            order = list(queries)
            rng.shuffle(order)
        if rng.random() < long_tail:
            text, intent = rng.choice(LONG_TAIL), ""
        else:
            text, intent = order.pop()
        keys = typed(text, lex, rng)[:left]
        left -= len(keys)
        yield Session(text, intent, keys)
