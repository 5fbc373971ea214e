"""The shipped corpus (big, bilingual, safe to split) and accuracy reported per language."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from rtgate.apps.autocomplete.bench import accuracy
from rtgate.apps.autocomplete.intents_cli import holdout_report
from rtgate.apps.autocomplete.tiers import BackgroundOnly, Reader
from rtgate.core.budget import Budget
from rtgate.domains.loader import INTENTS, load_corpus
from rtgate.tiers.intents import Example, holdout_split
from rtgate.tiers.textnorm import normalize, prefixes
from tests.apps.autocomplete.ac_helpers import engine_with

LANGS = ("zh", "en")


def test_every_intent_has_enough_queries_in_both_languages() -> None:
    counts = Counter((ex.intent, ex.lang) for ex in load_corpus())
    for intent in INTENTS:
        floor = 20 if intent == "complex" else 40
        for lang in LANGS:
            assert counts[intent, lang] >= floor, (intent, lang, counts[intent, lang])


def test_no_two_queries_normalise_alike() -> None:
    """A near-duplicate could land on both sides of the split and leak the held-out part."""
    keys = Counter(normalize(ex.text) for ex in load_corpus())
    assert [k for k, n in keys.items() if n > 1] == []


def test_queries_carry_numbers_in_both_languages() -> None:
    corpus = load_corpus()
    for lang in LANGS:
        rows = [ex.text for ex in corpus if ex.lang == lang]
        assert sum(bool(re.search(r"\d", t)) for t in rows) / len(rows) >= 0.05, lang


def test_held_out_split_covers_every_intent_in_both_languages() -> None:
    _, test = holdout_split(load_corpus())
    assert {(ex.intent, ex.lang) for ex in test} == {(i, lang) for i in INTENTS for lang in LANGS}


class InstantScorer:
    """A local model that answers at once and prefers nothing (no waiting in tests)."""

    label = "instant"

    async def score(self, typed: str, candidates: Sequence[str], budget: Budget) -> list[float]:
        return [0.0] * len(candidates)

    async def aclose(self) -> None:
        return None


async def test_accuracy_is_broken_down_by_language(reader: Reader, gated: BackgroundOnly) -> None:
    test = [
        Example("我的卡丢了怎么挂失", "card_loss", "zh"),
        Example("how do I activate my new card", "activation", "en"),
    ]
    async with engine_with(reader, cloud=gated, local_scorer=InstantScorer()) as engine:
        report = await accuracy(engine, test)
    for block in (report, report["typed"]):
        by = block["by_lang"]
        assert set(by) == set(LANGS)
        assert sum(b["n_prefixes"] for b in by.values()) == block["n_prefixes"]
        hits = sum(b["top3"] * b["n_prefixes"] for b in by.values())
        assert abs(hits / block["n_prefixes"] - block["top3"]) < 1e-3
    assert report["by_lang"]["zh"]["n_prefixes"] == len(prefixes(test[0].text))
    assert report["by_lang"]["en"]["n_prefixes"] == len(prefixes(test[1].text))


def test_intents_eval_reports_each_language() -> None:
    report = holdout_report("ngram")
    by = report["by_lang"]
    assert set(by) == set(LANGS)
    assert sum(b["n_prefixes"] for b in by.values()) == report["n_prefixes"]
    assert sum(b["n_queries"] for b in by.values()) == report["n_queries"]
    hits = sum(b["prefix_top3"] * b["n_prefixes"] for b in by.values())
    assert abs(hits / report["n_prefixes"] - report["prefix_top3"]) < 1e-9
