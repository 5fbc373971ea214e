"""Hostile input on every entry point this module can reach without a model: text with
lone surrogates, control and right-to-left characters; binary, odd-sized and deeply nested
WebSocket frames; deeply nested JSON bodies; MQTT topics with wildcards; truncated and
random audio. The properties: never a 5xx, never an unhandled exception or a logged
traceback, a clear 4xx in the one error shape, and every refused socket closed with a code.
"""

from __future__ import annotations

import json
import logging
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from rtgate.apps.guard.audio import WavStream, read_wav, write_wav
from rtgate.apps.guard.topics import check_topic, expand_topic
from rtgate.core.errors import InvalidRequest
from rtgate.server import create_app
from rtgate.tiers.fake import FakeTier
from tests.server.server_helpers import fake_gate, server_only_config

NASTY = ["\ud800", "\udfff", "\x00", "\x07", "\x1b[2J", "\u202e", "\u200f", "\u0085", "\ufeff"]
hostile_text = st.lists(
    st.one_of(st.text(max_size=6), st.sampled_from(NASTY)), min_size=1, max_size=8
).map("".join)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    gate = fake_gate([FakeTier("local", 50, ["ok"])], local=5.0)
    app = create_app(server_only_config(), gate=gate, warmup=False)
    with TestClient(app, raise_server_exceptions=True) as c:
        yield c


def _is_error_shape(body: object) -> bool:
    return isinstance(body, dict) and {"code", "message", "type"} <= set(body.get("error", {}))


def _no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info is not None or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


@settings(FAST, suppress_health_check=[HealthCheck.function_scoped_fixture])  # cleared per input
@given(text=hostile_text)
def test_http_routes_answer_or_refuse_hostile_text(
    client: TestClient, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.clear()
    bodies = {
        "/v1/gate": {"input": text},
        "/v1/chat/completions": {"model": "auto", "messages": [{"role": "user", "content": text}]},
    }
    for path, body in bodies.items():
        raw = json.dumps(body, ensure_ascii=True).encode()  # surrogates travel as \\ud800
        r = client.post(path, content=raw, headers={"content-type": "application/json"})
        assert r.status_code < 500, (path, r.text)
        if r.status_code >= 400:
            assert _is_error_shape(r.json())
    _no_traceback(caplog)


@pytest.mark.parametrize("depth", [50, 1000, 5000])
def test_deeply_nested_json_bodies_are_a_4xx(client: TestClient, depth: int) -> None:
    raw = ("[" * depth + "]" * depth).encode()
    for path in ("/v1/gate", "/v1/chat/completions"):
        r = client.post(path, content=raw, headers={"content-type": "application/json"})
        assert 400 <= r.status_code < 500 and _is_error_shape(r.json())


@FAST
@given(text=hostile_text)
def test_the_websocket_answers_or_refuses_hostile_text(client: TestClient, text: str) -> None:
    with client.websocket_connect("/v1/ws") as ws:
        ws.send_text(json.dumps({"seq": 1, "input": text}, ensure_ascii=True))
        msg = ws.receive_json()
        while msg["type"] not in ("answer", "error"):
            msg = ws.receive_json()
        if msg["type"] == "error":
            assert _is_error_shape(msg)


@FAST
@given(frame=st.binary(max_size=64))
def test_a_binary_frame_is_answered_and_closed_with_a_code(
    client: TestClient, frame: bytes
) -> None:
    with client.websocket_connect("/v1/ws") as ws:
        ws.send_bytes(frame)
        assert ws.receive_json()["type"] == "error"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 1003


@FAST
@given(topic=st.text(max_size=40) | st.sampled_from(["a/+/b", "#", "line/{nope}", "", "\x00"]))
def test_topics_are_accepted_or_refused_clearly(topic: str) -> None:
    try:
        check_topic(expand_topic(topic, "C"), "stop topic")
    except InvalidRequest:
        return
    assert "+" not in topic and "#" not in topic and topic


def _wav(n: int) -> bytes:
    head = struct.pack("<4sI4s", b"RIFF", 36 + 2 * n, b"WAVE")
    head += struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, 16000, 32000, 2, 16)
    return head + struct.pack("<4sI", b"data", 2 * n) + b"\x01\x00" * n


@FAST
@given(cut=st.integers(0, 60), junk=st.binary(max_size=32))
def test_truncated_or_random_audio_is_read_or_refused(
    tmp_path_factory: pytest.TempPathFactory, cut: int, junk: bytes
) -> None:
    path: Path = tmp_path_factory.mktemp("wav") / "x.wav"
    for data in (_wav(8)[:cut], junk, _wav(8)[:cut] + junk):
        path.write_bytes(data)
        for read in (lambda: read_wav(path), lambda: list(WavStream(path).blocks())):
            try:
                read()
            except InvalidRequest:
                pass


def test_a_whole_wav_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "ok.wav"
    write_wav(path, np.full(800, 0.25, np.float32))
    assert np.allclose(np.concatenate(list(WavStream(path).blocks())), read_wav(path))
