"""The candidate pool's similarity search against a plain set-intersection reference."""

from __future__ import annotations

import math

import pytest

from rtgate.apps.autocomplete.pool import CandidatePool, Entry
from rtgate.domains.loader import DATA_DIR
from rtgate.tiers.intents import Example, load_examples
from rtgate.tiers.textnorm import normalize


def bigrams(s: str) -> set[str]:
    s = s.replace(" ", "_")
    return {s[i : i + 2] for i in range(len(s) - 1)}


def reference(pool: CandidatePool, text: str, intent: str | None) -> list[tuple[float, Entry]]:
    q = bigrams(normalize(text))
    out = []
    for e in pool.all:
        g = bigrams(e.key)
        if (intent is None or e.intent == intent) and q & g:
            out.append((len(q & g) / math.sqrt(len(q) * len(g)), e))
    return sorted(out, key=lambda s: -s[0])  # stable: ties keep corpus order


@pytest.fixture(scope="module")
def pool() -> CandidatePool:
    return CandidatePool(load_examples(DATA_DIR / "corpus.jsonl"))


@pytest.mark.parametrize(
    "text", ["我想把积分", "怎么提高额度", "如果我分期还款同时", "can i pay", "how do i", "卡丢了"]
)
@pytest.mark.parametrize("intent", [None, "complex", "card_loss"])
def test_similar_matches_the_reference(pool: CandidatePool, text: str, intent: str | None) -> None:
    got = pool.similar(text, intent)
    want = reference(pool, text, intent)
    assert [e for _, e in got] == [e for _, e in want]
    assert [s for s, _ in got] == pytest.approx([s for s, _ in want])
    assert pool.nearest(text, 2, intent) == [e for _, e in want[:2]]


def test_nothing_shared_is_nothing_found() -> None:
    pool = CandidatePool([Example("我想把积分兑换成话费", "points_exchange")])
    assert pool.similar("xyz") == [] and pool.similar("") == []
    assert [e.intent for _, e in pool.similar("积分")] == ["points_exchange"]
    assert pool.similar("积分", "card_loss") == []
