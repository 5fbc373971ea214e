from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rtgate.core.budget import Budget
from rtgate.core.errors import ConfigError, Declined
from rtgate.core.request import Piece, Request
from rtgate.domains.loader import (
    INTENTS,
    build_answers,
    corpus_digest,
    load_corpus,
    model_path,
)
from rtgate.tiers.classifier import ClassifierTier, IntentClassifier
from rtgate.tiers.embed_classifier import EmbeddingIntentClassifier
from rtgate.tiers.intents import Example, evaluate, holdout_split, parse_examples

# Measured on the held-out 20 % (244 queries, 1809 prefixes): query accuracy 0.898,
# prefix top-3 0.840 (en 0.769, zh 0.884). The floors leave a margin for corpus edits.
QUERY_ACCURACY_FLOOR = 0.80
PREFIX_TOP3_FLOOR = 0.75


@pytest.fixture(scope="session")
def split() -> tuple[list[Example], list[Example]]:
    return holdout_split(load_corpus())


@pytest.fixture(scope="session")
def trained(split: tuple[list[Example], list[Example]]) -> IntentClassifier:
    return IntentClassifier.train(split[0])


def test_corpus_is_big_bilingual_and_uses_every_intent() -> None:
    corpus = load_corpus()
    assert len(corpus) >= 400
    assert {ex.intent for ex in corpus} == set(INTENTS)
    assert sum(ex.lang == "en" for ex in corpus) >= 150
    assert len({ex.text for ex in corpus}) == len(corpus)


def test_split_is_deterministic_stratified_and_disjoint(
    split: tuple[list[Example], list[Example]],
) -> None:
    train, test = split
    _, test_again = holdout_split(list(reversed(load_corpus())))  # file order does not matter
    assert {e.text for e in test_again} == {e.text for e in test}
    assert not {e.text for e in train} & {e.text for e in test}
    assert {e.intent for e in test} == set(INTENTS)
    assert 0.15 < len(test) / (len(train) + len(test)) < 0.25


def test_held_out_accuracy_on_queries_and_prefixes(
    trained: IntentClassifier, split: tuple[list[Example], list[Example]]
) -> None:
    report = evaluate(trained.rank, split[1])
    assert report["query_accuracy"] >= QUERY_ACCURACY_FLOOR, report
    assert report["prefix_top3"] >= PREFIX_TOP3_FLOOR, report


def test_confidence_is_calibrated_enough_to_rank(
    trained: IntentClassifier, split: tuple[list[Example], list[Example]]
) -> None:
    top = [trained.rank(ex.text)[0] for ex in split[1]]
    conf = np.array([p for _, p in top])
    ok = np.array([i == ex.intent for (i, _), ex in zip(top, split[1], strict=True)])
    order = np.argsort(conf)
    thirds = np.array_split(ok[order], 3)  # low, middle, high confidence
    accuracy = [float(t.mean()) for t in thirds]
    assert accuracy[0] <= accuracy[1] <= accuracy[2], accuracy
    assert conf[ok].mean() > conf[~ok].mean()
    p = trained.proba("我的卡丢了")
    assert p.shape == (len(INTENTS),) and abs(float(p.sum()) - 1.0) < 1e-9


def test_save_load_round_trip_is_exact(trained: IntentClassifier, tmp_path: Path) -> None:
    path = tmp_path / "m.npz"
    trained.save(path)
    loaded = IntentClassifier.load(path)
    for text in ("我想把积分兑换成话费", "how do I activate my card", "zzz"):
        assert np.array_equal(trained.proba(text), loaded.proba(text))
    assert loaded.classes == trained.classes


def test_loading_something_else_is_a_config_error(tmp_path: Path) -> None:
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"\x80\x04not a model")
    with pytest.raises(ConfigError):
        IntentClassifier.load(junk)
    other = tmp_path / "arrays.npz"
    np.savez(other, a=np.arange(3))
    with pytest.raises(ConfigError, match="header"):
        IntentClassifier.load(other)
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, __header__=np.array([{"format": "x"}], dtype=object))
    with pytest.raises(ConfigError):  # object arrays need pickle: refused
        IntentClassifier.load(pickled)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"text": "a", "intent": "x"}', "{oops"], r"corpus>:2: not valid JSON"),
        (['["a", "x"]'], r":1: expected an object"),
        (['{"text": "", "intent": "x"}'], r":1: 'text' must be"),
        (['{"text": "a"}'], r":1: 'intent' must be"),
        (['{"text": "a", "intent": "x", "lang": "fr"}'], r":1: 'lang' must be"),
        (["", "# only a comment"], "no examples"),
    ],
)
def test_bad_jsonl_is_a_clear_error(lines: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_examples(lines)
    with pytest.raises(ConfigError, match="unknown intent"):
        parse_examples(['{"text": "a", "intent": "x"}'], intents={"y"})


async def test_tier_answers_confident_queries_with_candidates(trained: IntentClassifier) -> None:
    tier = ClassifierTier(trained, build_answers(), threshold=0.5)
    pieces = [p async for p in tier.stream(Request("我的信用卡丢了，快帮我挂失"), Budget(50))]
    assert len(pieces) == 1 and isinstance(pieces[0], Piece)
    data = pieces[0].data
    assert data is not None and data["intent"] == "card_loss" and data["confidence"] >= 0.5
    assert data["candidates"] and all(c["intent"] in INTENTS for c in data["candidates"])
    assert pieces[0].text.startswith("可在手机银行")  # the Chinese canned reply


async def test_tier_declines_low_confidence_and_complex_asks(trained: IntentClassifier) -> None:
    strict = ClassifierTier(trained, threshold=1.01)
    with pytest.raises(Declined, match="confidence"):
        async for _ in strict.stream(Request("我的信用卡丢了"), Budget(50)):
            pass
    tier = ClassifierTier(trained, threshold=0.0)
    ask = "我下个月去日本，想临时提额到5万，同时把上个月12000的消费分6期，境外手续费能不能免"
    assert trained.rank(ask)[0][0] == "complex"
    with pytest.raises(Declined, match="bigger model"):
        async for _ in tier.stream(Request(ask), Budget(50)):
            pass


def test_candidates_extend_the_typed_prefix(trained: IntentClassifier) -> None:
    answers = build_answers()
    typed = "我想把积分"
    cands = answers.candidates(typed, trained.rank(typed), limit=5)
    assert cands and cands[0].intent == "points_exchange"
    assert cands[0].text.startswith(typed)


def test_shipped_models_match_the_corpus() -> None:
    digest = corpus_digest()
    ngram = IntentClassifier.load(model_path("ngram"))
    assert ngram.meta["corpus_sha256"] == digest, "retrain: rtgate intents train"
    assert ngram.rank("我想把额度提到5万")[0][0] == "limit_increase"


@pytest.mark.slow
def test_shipped_embedding_classifier_ranks_paraphrases() -> None:
    model = EmbeddingIntentClassifier.load(model_path("e5"))
    assert model.meta["corpus_sha256"] == corpus_digest(), "retrain: rtgate intents train"
    assert model.rank("lost my wallet with the card inside")[0][0] == "card_loss"
    assert "activation" in [k for k, _ in model.rank("新卡到手了咋")[:3]]
