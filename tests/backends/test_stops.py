from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from rtgate.backends.stops import StopFilter, looping


def run(deltas: list[str], stops: list[str]) -> tuple[str, bool]:
    f = StopFilter(stops)
    out = "".join(f.feed(d) for d in deltas) + f.flush()
    return out, f.done


def test_stop_split_across_deltas_is_cut() -> None:
    assert run(["Sure.", "\nCust", "omer: hi"], ["\nCustomer:"]) == ("Sure.", True)


def test_held_tail_is_released_when_it_cannot_be_a_stop() -> None:
    f = StopFilter(["\nCustomer:"])
    assert f.feed("ok\nCu") == "ok"
    assert f.feed("te") == "\nCute"
    assert not f.done


def test_no_stops_passes_through() -> None:
    assert run(["a", "b"], []) == ("ab", False)


def test_earliest_stop_wins() -> None:
    assert run(["one two three"], ["three", "two"]) == ("one ", True)


@given(
    text=st.text(alphabet="ab\n:客服", max_size=40),
    cuts=st.lists(st.integers(min_value=0, max_value=40), max_size=8),
    stop=st.text(alphabet="ab\n:客服", min_size=1, max_size=4),
)
def test_any_split_gives_text_up_to_first_stop(text: str, cuts: list[int], stop: str) -> None:
    bounds = sorted({min(c, len(text)) for c in cuts})
    pieces = [text[i:j] for i, j in zip([0, *bounds], [*bounds, len(text)], strict=True)]
    i = text.find(stop)
    expected = text if i < 0 else text[:i]
    assert run(pieces, [stop]) == (expected, i >= 0)


def test_looping_detects_repeated_phrase() -> None:
    assert looping("请问您是投诉的快递员，请问您是投诉的快递员，")
    assert looping("ha ha ha ha ")
    assert looping("但是我的宽带" + "卡" * 6)  # one character on and on (natural9, session 27)


def test_looping_ignores_numbers_and_normal_text() -> None:
    assert not looping("订单号10000000")
    assert not looping("!!!!!!!!")
    assert not looping("Yes, we ship internationally.")
    assert not looping("嗯嗯嗯，好的") and not looping("Zzzzz")
