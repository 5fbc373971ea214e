"""Properties of the stream parsers: SSE framing and the OpenAI chunk interpreter."""

from __future__ import annotations

import itertools
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from rtgate.backends.openai_compat import _interpret
from rtgate.backends.sse import SSEDecoder, SSEEvent
from rtgate.core.errors import BackendProtocolError


def decode(chunks: list[bytes]) -> list[SSEEvent]:
    d = SSEDecoder()
    out: list[SSEEvent] = []
    for c in chunks:
        out += d.feed(c)
    return out + d.flush()


@st.composite
def split(draw: st.DrawFn, data: bytes) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=8)))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.data())
def test_any_bytes_any_split_same_events_and_no_crash(data: bytes, draw: st.DataObject) -> None:
    whole = decode([data])
    assert decode(draw.draw(split(data))) == whole
    for ev in whole:
        assert ev.data != "" or ev.event  # a dispatched event carries something
        assert "\r" not in ev.data


_field = st.sampled_from([b"data:", b"data: ", b"event:", b"id:", b"retry:", b":", b"", b"x:"])
_value = st.binary(max_size=20).filter(lambda b: b"\n" not in b and b"\r" not in b)
_line = st.tuples(_field, _value).map(lambda t: t[0] + t[1])
_eol = st.sampled_from([b"\n", b"\r\n", b"\r"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_line, _eol), max_size=12), st.data())
def test_line_structured_input_is_split_invariant(
    lines: list[tuple[bytes, bytes]], draw: st.DataObject
) -> None:
    data = b"".join(a + b for a, b in lines)
    assert decode(draw.draw(split(data))) == decode([data])


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=12,
)
_chunkish = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "delta": st.fixed_dictionaries({}, optional={"content": _json}) | _json,
                    "text": _json,
                    "finish_reason": _json,
                },
            )
            | _json,
            max_size=2,
        )
        | _json,
        "error": _json,
    },
)


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(_chunkish.map(json.dumps), _json.map(json.dumps), st.text(max_size=40)),
    st.sampled_from(["message", "error", "ping"]),
)
def test_chunk_interpreter_returns_text_or_raises_a_protocol_error(data: str, event: str) -> None:
    try:
        out = _interpret(SSEEvent(data=data, event=event))
    except BackendProtocolError as e:
        assert str(e)
        return
    if out is not None:
        text, finished = out
        assert isinstance(text, str) and isinstance(finished, bool)
    else:
        assert data.strip() == "[DONE]"
