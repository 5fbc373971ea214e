from __future__ import annotations

import pytest

from rtgate.tiers._cache_signature import compatible, negation_count, numbers, signature, time_marks
from rtgate.tiers.textnorm import lang_of, normalize, prefixes


@pytest.mark.parametrize(
    ("raw", "norm"),
    [
        ("我想把额度提到 5 万！", "我想把额度提到5万"),
        ("ＡＴＭ取现，每天最多？", "atm取现每天最多"),
        ("I can\u2019t  activate my NEW card...", "i cant activate my new card"),
        ("pay $50,000.50 now", "pay 50000.50 now"),
        ("1.5% fee", "1.5% fee"),
        ("\u3000全角\u3000空格 ", "全角空格"),
        ("!!!", ""),
    ],
)
def test_normalize_folds_width_case_space_and_punctuation(raw: str, norm: str) -> None:
    assert normalize(raw) == norm


def test_prefixes_grow_by_character_in_chinese_and_by_word_in_english() -> None:
    assert prefixes("我想把额度") == ["我想", "我想把", "我想把额"]
    assert prefixes("How do I pay", include_full=True) == ["how do", "how do i", "how do i pay"]
    assert lang_of("visa和万事达") == "zh" and lang_of("hello 5") == "en"


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("能退年费吗", 0),
        ("不能退年费吗", 1),
        ("能不能退年费", 0),  # an A-not-A question asks, it does not negate
        ("可以不可以退", 0),
        ("是否可以退", 0),
        ("非常感谢", 0),
        ("我没收到卡，不能激活", 2),
        ("can I activate it", 0),
        ("I can't activate it", 1),
        ("I cannot activate it", 1),
        ("i cant activate it", 1),
    ],
)
def test_negation_count(text: str, count: int) -> None:
    assert negation_count(text) == count


@pytest.mark.parametrize(
    ("text", "values"),
    [
        ("分3期", (3.0,)),
        ("分三期", (3.0,)),
        ("额度提到5万", (50000.0,)),
        ("额度提到五万", (50000.0,)),
        ("2万8", (28000.0,)),
        ("三千五", (3500.0,)),
        ("一百零五", (105.0,)),
        ("十二期", (12.0,)),
        ("1.5万", (15000.0,)),
        ("12000的消费分6期", (6.0, 12000.0)),
        ("5k limit", (5000.0,)),
        ("twenty five dollars", (25.0,)),
        ("three thousand points", (3000.0,)),
        ("帮我查一下万事达卡", ()),  # idioms and names are not numbers
    ],
)
def test_numbers_read_digits_chinese_numerals_and_words(
    text: str, values: tuple[float, ...]
) -> None:
    assert numbers(text) == values


def test_signatures_tell_apart_what_embeddings_confuse() -> None:
    assert not compatible("能退年费吗", "不能退年费吗")
    assert not compatible("账单分3期手续费多少", "账单分6期手续费多少")
    assert not compatible("查一下这个月的账单", "查一下上个月的账单")
    assert not compatible("can I get a refund", "can't I get a refund")
    assert compatible("账单分3期手续费多少", "账单分三期的手续费是多少")
    assert compatible("能不能退年费", "年费能退吗")
    assert time_marks("上个月和这个月") == ("month+0", "month-1")
    assert signature("本月") == signature("this month")
