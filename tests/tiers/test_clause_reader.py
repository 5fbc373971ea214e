"""The clause reader: clauses, weak role labels, the ask-level reading, its file, and the
semantic check that reads a veto again clause by clause."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from rtgate.core.errors import ConfigError
from rtgate.models.embeddings import DIM
from rtgate.tiers._linear import LinearHead
from rtgate.tiers.clause_reader import (
    ASK_FEATURES,
    ClauseReader,
    ask_features,
    clauses,
    place_features,
    request_view,
    split,
    weak_roles,
)
from rtgate.tiers.semantic_scope import SemanticScope

SITUATION_FIRST = "我上周二在积分商城换了个电饭煲，积分已经扣了但是东西一直没到，怎么办"
TWO_ASKS = "I lost my card yesterday, can you block it and also send me a new one?"


def test_an_ask_splits_at_punctuation_and_joining_words() -> None:
    assert split(SITUATION_FIRST) == [
        "我上周二在积分商城换了个电饭煲",
        "积分已经扣了但是东西一直没到",
        "怎么办",
    ]
    assert split("帮我查下账单顺便把积分兑了") == ["帮我查下账单", "把积分兑了"]
    assert split("what is my limit and can I raise it") == ["what is my limit", "can I raise it"]
    assert split("I paid 1,200 on the 3.5% plan, can you waive it") == [
        "I paid 1,200 on the 3.5% plan",
        "can you waive it",
    ]
    read = clauses(TWO_ASKS)
    assert [c for c, _, _ in read] == [
        "i lost my card yesterday",
        "can you block it",
        "send me a new one",
    ]
    assert [j for _, _, j in read] == [False, False, True]  # "and also" starts the last
    assert read[-1][1] and not read[0][1]  # only the last ended in a question mark


def test_a_simple_ask_has_one_request_and_a_multi_part_ask_leaves_uncued_clauses_open() -> None:
    roles = [y for _, _, y in weak_roles(SITUATION_FIRST, "simple")]
    assert roles == [0, 0, 1]
    # no clause cued: the last is the request
    assert [y for _, _, y in weak_roles("卡丢了，昨天在地铁上", "simple")] == [0, 1]
    multi = weak_roles("我的卡上周丢了，能不能帮我冻结，另外把积分兑了", "multi")
    assert [y for _, _, y in multi] == [None, 1, 1]


def test_two_requests_of_different_intents_read_as_two() -> None:
    a, b = np.array([0.9, 0.1, 0.0]), np.array([0.0, 0.1, 0.9])
    two = ask_features([0.9, 0.95], [a, b], zh=False)
    same = ask_features([0.9, 0.95], [a, a], zh=False)
    situation = ask_features([0.05, 0.95], [a, b], zh=True)
    assert two[1] > 0.7 > same[1] and situation[1] < 0.1
    assert two[2] == pytest.approx(0.81) and same[2] == 0.0
    assert situation[-1] == 1.0 and len(two) == len(ASK_FEATURES)
    assert ask_features([0.9], [a], zh=False)[1:3] == [0.0, 0.0]


class _Embedder:
    """Requests say "can" or "把" (dimension 0), the intent is "card" or "points"
    (dimension 1 or 2)."""

    def embed(self, text: str) -> npt.NDArray[np.float32]:
        out: npt.NDArray[np.float32] = self.embed_many([text])[0]
        return out

    def embed_many(self, texts: list[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), DIM), dtype=np.float32)
        for k, t in enumerate(texts):
            out[k, 0] = 1.0 if ("can" in t or "把" in t) else -1.0
            out[k, 1 if ("card" in t or "卡" in t) else 2] = 1.0
        return out


def _reader(embedder: _Embedder) -> ClauseReader:
    n_in = DIM + len(place_features(0, 1, "a", False))
    role = np.zeros((n_in, 2))
    role[0] = [4.0, -4.0]
    intents = np.zeros((DIM, 3))
    intents[1, 0] = intents[2, 1] = 5.0
    return ClauseReader(
        LinearHead(("request", "situation"), role, np.zeros(2), 1.0),
        LinearHead(("card", "points", "complex"), intents, np.zeros(3), 1.0),
        [1.0, 6.0, 0.0, 0.0, 0.0],
        -4.0,
        embedder=embedder,  # type: ignore[arg-type]
        bar=0.3,
    )


def test_the_reader_tells_one_ask_from_two_and_round_trips(tmp_path: Path) -> None:
    reader = _reader(_Embedder())
    one = reader.read("my card was stolen yesterday, can you block the card")
    two = reader.read("can you block my card, and can you redeem my points")
    assert [p.intent for p in one.parts] == ["card", "card"] and one.requests == 1
    assert two.requests == 2 and {p.intent for p in two.parts} == {"card", "points"}
    assert one.p_multi < reader.bar <= two.p_multi
    assert reader.one_ask("my card was stolen yesterday, can you block the card")
    assert reader.read("").parts == ()
    path = tmp_path / "c.npz"
    reader.save(path)
    back = ClauseReader.load(path, reader.intent_head, _Embedder())  # type: ignore[arg-type]
    assert back.bar == 0.3
    assert back.read("can you block my card, and can you redeem my points").p_multi == (
        pytest.approx(two.p_multi)
    )
    with pytest.raises(ConfigError, match="ask weights"):
        ClauseReader(reader.role, reader.intent_head, [1.0], 0.0, embedder=_Embedder())  # type: ignore[arg-type]


def test_the_check_lowers_a_veto_the_reader_reads_as_one_request() -> None:
    # the head: "card" texts read multi-part (0.9), "far" texts out of the domain (0.9)
    head_coef = np.zeros((DIM, 3))
    head_coef[1] = [3.0, -3.0, 0.0]
    head_coef[3] = [-3.0, 3.0, 0.0]

    class Emb(_Embedder):
        def embed_many(self, texts: list[str]) -> npt.NDArray[np.float32]:
            out = super().embed_many(texts)
            for k, t in enumerate(texts):
                out[k, 3] = 1.0 if "far" in t else 0.0
                if "far" in t:
                    out[k, 1] = 0.0
            return out

    emb = Emb()
    head = LinearHead(("multi", "ood", "simple"), head_coef, np.zeros(3), 1.0)
    scope = SemanticScope(head, emb, bar=0.8, pause_bar=0.6)  # type: ignore[arg-type]
    one = "my card was stolen yesterday, can you block the card"
    two = "can you block my card, and can you redeem my points"
    before = scope.out_of_scope(one)
    assert scope.vetoes(before)
    scope.parts = _reader(emb)
    after = scope.out_of_scope(one)
    assert after < before and not scope.vetoes(after, pause=True) and scope.spared == 1
    assert scope.out_of_scope(two) == pytest.approx(before)  # two requests: as it was
    # one clause says nothing of one ask or two: as it was
    assert scope.out_of_scope("can you block the card") == pytest.approx(before)
    far = "the weather far away, can you tell me"
    assert scope.vetoes(scope.out_of_scope(far))  # out of the domain: the head says so
    assert scope.spared == 1


def test_the_request_view_drops_the_situation_and_keeps_every_request() -> None:
    # a long personal ask: its situation (a merchant, an amount, a date) is not read
    story = "I bought a coffee machine at Costco for 1,200 last week, it arrived broken, "
    assert request_view(story + "how do I dispute the charge?") == "how do I dispute the charge?"
    assert request_view(SITUATION_FIRST) == "怎么办"
    # two requests stay two, whatever stands between them
    assert request_view(TWO_ASKS) == "can you block it, send me a new one?"
    two_zh = "我上个月在国外刷卡被收了两次手续费，能不能退回来，另外帮我把账单分期"
    assert request_view(two_zh) == "能不能退回来，帮我把账单分期"
    # one clause is itself; a situation still being typed: its last clause, or all of it
    assert request_view("how do I dispute a charge") == "how do I dispute a charge"
    typing = "I bought a coffee machine at Costco last week, it arrived broken and the"
    assert request_view(typing) == "it arrived broken and the"
    assert request_view(typing, unasked="whole") == typing


def test_the_check_reads_what_its_view_gives() -> None:
    head_coef = np.zeros((DIM, 3))
    head_coef[3] = [0.0, 6.0, 0.0]  # "far" texts: out of the domain

    class Emb(_Embedder):
        def embed_many(self, texts: list[str]) -> npt.NDArray[np.float32]:
            out = super().embed_many(texts)
            for k, t in enumerate(texts):
                out[k, 3] = 1.0 if "far" in t else 0.0
            return out

    head = LinearHead(("multi", "ood", "simple"), head_coef, np.zeros(3), 1.0)
    scope = SemanticScope(head, Emb(), bar=0.8)  # type: ignore[arg-type]
    ask = "I bought a lamp in a far away shop last week, how do I dispute the charge?"
    assert scope.vetoes(scope.out_of_scope(ask))  # the merchant reads out of the domain
    scope.view = request_view
    assert not scope.vetoes(scope.out_of_scope(ask))  # the request does not
    assert scope.vetoes(scope.out_of_scope("how far is the moon, can you tell me"))
