from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rtgate.core.budget import Budget
from rtgate.core.errors import ConfigError, Declined
from rtgate.core.request import Piece, Request
from rtgate.domains.loader import INTENTS, load_templates
from rtgate.tiers.templates import TemplateTable, TemplateTier

TABLE: dict[str, Any] = {
    "version": 1,
    "templates": [
        {"id": "zh.ba", "kind": "prefix", "patterns": ["我想把"], "candidates": [
            {"text": "我想把积分兑换成话费", "intent": "points_exchange"},
            {"text": "我想把额度提到 5 万", "intent": "limit_increase"}]},
        {"id": "zh.xiang", "kind": "prefix", "patterns": ["我想"], "candidates": [
            {"text": "我想还信用卡", "intent": "repayment"}]},
        {"id": "en.how", "kind": "prefix", "patterns": ["How do I"], "candidates": [
            {"text": "How do I activate my card", "intent": "activation"},
            {"text": "How do I pay my bill", "intent": "repayment"}]},
        {"id": "kw.lost", "kind": "keyword", "patterns": ["挂失", "lost my card"],
         "reply": "可在手机银行挂失", "candidates": [
            {"text": "我的信用卡丢了", "intent": "card_loss"}]},
        {"id": "kw.fee", "kind": "keyword", "patterns": ["年费"], "candidates": [
            {"text": "年费怎么免", "intent": "annual_fee"}]},
    ],
}  # fmt: skip


@pytest.fixture
def table() -> TemplateTable:
    return TemplateTable.from_dict(TABLE)


def test_chinese_prefix_suggests_every_candidate(table: TemplateTable) -> None:
    hit = table.match("我想把")
    assert hit is not None and hit.template.id == "zh.ba"
    assert [c.text for c in hit.candidates] == ["我想把积分兑换成话费", "我想把额度提到 5 万"]


def test_longer_input_keeps_only_candidates_that_extend_it(table: TemplateTable) -> None:
    hit = table.match("我想把额度提到 5")
    assert hit is not None and [c.intent for c in hit.candidates] == ["limit_increase"]
    shorter = table.match("我想还")  # falls back to the shorter pattern that still fits
    assert shorter is not None and shorter.template.id == "zh.xiang"
    assert table.match("我想把钱") is None


def test_english_prefix_after_normalisation(table: TemplateTable) -> None:
    for typed in ("how do i", "ＨＯＷ  ＤＯ Ｉ", "How do I, act"):
        hit = table.match(typed)
        assert hit is not None and hit.template.id == "en.how", typed
    hit = table.match("how do i act")
    assert hit is not None and [c.text for c in hit.candidates] == ["How do I activate my card"]


def test_keyword_anywhere_with_reply_and_ambiguity_declines(table: TemplateTable) -> None:
    hit = table.match("昨天卡丢了怎么挂失？")
    assert hit is not None and hit.intent == "card_loss" and hit.text == "可在手机银行挂失"
    assert table.match("I LOST MY CARD!!") is not None
    assert table.match("挂失以后年费还要交吗") is None  # two intents at once


def test_keyword_ignores_long_multi_part_asks() -> None:
    long = "我" * 50 + "挂失"
    assert TemplateTable.from_dict(TABLE, max_keyword_chars=40).match(long) is None
    assert TemplateTable.from_dict(TABLE, max_keyword_chars=100).match(long) is not None


async def test_tier_yields_one_piece_with_data_and_declines_on_a_miss(
    table: TemplateTable,
) -> None:
    tier = TemplateTier(table)
    pieces = [p async for p in tier.stream(Request("我想把"), Budget(50))]
    assert len(pieces) == 1 and isinstance(pieces[0], Piece)
    data = pieces[0].data
    assert data is not None and data["template_id"] == "zh.ba"
    assert data["intent"] == "points_exchange" and len(data["candidates"]) == 2
    with pytest.raises(Declined):
        async for _ in tier.stream(Request("今天天气怎么样"), Budget(50)):
            pass


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["templates"].append(dict(d["templates"][0])), "duplicate template id"),
        (lambda d: d["templates"][0].update(kind="regex"), "'kind'"),
        (lambda d: d["templates"][0].update(patterns=["！！"]), "empty after normalisation"),
        (lambda d: d["templates"][0]["candidates"][0].pop("intent"), "needs an 'intent'"),
        (lambda d: d["templates"][1].update(patterns=["我想把"]), "already used"),
        (lambda d: d["templates"][0]["candidates"][0].update(intent="nope"), "unknown intent"),
    ],
)
def test_bad_template_data_is_a_clear_config_error(change: Any, message: str) -> None:
    data = json.loads(json.dumps(TABLE))
    change(data)
    with pytest.raises(ConfigError, match=message):
        TemplateTable.from_dict(data, intents=INTENTS)


def test_unreadable_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "t.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"t\.json"):
        TemplateTable.from_file(bad)


def test_shipped_autocomplete_templates_cover_the_issue_example() -> None:
    table = load_templates()
    hit = table.match("我想把")
    assert hit is not None
    texts = [c.text for c in hit.candidates]
    assert "我想把积分兑换成话费" in texts and "我想把额度提到 5 万" in texts
    assert all(c.intent in INTENTS for t in table.templates for c in t.candidates)
