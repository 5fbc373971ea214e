from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rtgate.backends.sse import SSEDecoder, SSEEvent


def parse(*chunks: bytes | str) -> list[SSEEvent]:
    d = SSEDecoder()
    out: list[SSEEvent] = []
    for c in chunks:
        out += d.feed(c)
    return out + d.flush()


def test_basic_events_and_done() -> None:
    evs = parse(b'data: {"a":1}\n\ndata: [DONE]\n\n')
    assert [e.data for e in evs] == ['{"a":1}', "[DONE]"]
    assert evs[0].event == "message"


def test_comments_are_skipped() -> None:
    assert [e.data for e in parse(b": keep-alive\n\n:ping\ndata: x\n\n")] == ["x"]


def test_multiline_data_joined_with_newline() -> None:
    assert parse(b"data: line1\ndata:line2\ndata\n\n")[0].data == "line1\nline2\n"


def test_event_id_retry_fields() -> None:
    ev = parse(b"event: error\nid: 7\nretry: 1500\ndata: {}\n\n")[0]
    assert (ev.event, ev.id, ev.retry, ev.data) == ("error", "7", 1500, "{}")


def test_crlf_and_cr_line_endings() -> None:
    assert [e.data for e in parse(b"data: a\r\n\r\ndata: b\r\rdata: c\n\n")] == ["a", "b", "c"]


def test_crlf_split_between_chunks_is_one_line_end() -> None:
    assert [e.data for e in parse(b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n")] == ["a", "b"]


def test_utf8_split_inside_a_character() -> None:
    raw = "data: 你好\n\n".encode()
    assert parse(raw[:7], raw[7:])[0].data == "你好"


def test_bom_and_event_without_data_are_ignored() -> None:
    assert [e.data for e in parse("\ufeffevent: ping\n\ndata: x\n\n")] == ["x"]


def test_unterminated_last_event_is_flushed() -> None:
    d = SSEDecoder()
    assert d.feed(b"data: [DONE]") == []
    assert [e.data for e in d.flush()] == ["[DONE]"]


# -- property: any chunking of the bytes yields the same events --------------------------

_values = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\r\n"),
    max_size=12,
)
_event = st.tuples(
    st.lists(_values, min_size=1, max_size=3),
    st.sampled_from(["", "update", "error"]),
    st.booleans(),
)
_newline = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[tuple[str, str]]]:
    text, expected = "", []
    for datas, name, comment in draw(st.lists(_event, max_size=6)):
        nl = draw(_newline)
        if comment:
            text += ": keep-alive" + nl
        if name:
            text += f"event: {name}{nl}"
        text += "".join(f"data: {v}{nl}" for v in datas) + nl
        expected.append((name or "message", "\n".join(datas)))
    return text.encode(), expected


@settings(max_examples=300, deadline=None)
@given(streams(), st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_chunk_boundaries_give_the_same_events(
    stream: tuple[bytes, list[tuple[str, str]]], cuts: list[int]
) -> None:
    raw, expected = stream
    bounds = sorted({min(c, len(raw)) for c in cuts})
    chunks = [raw[i:j] for i, j in zip([0, *bounds], [*bounds, len(raw)], strict=True)]
    assert [(e.event, e.data) for e in parse(*chunks)] == expected
