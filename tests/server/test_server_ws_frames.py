"""WS /v1/ws and unusable frames: an error message, then a close code; never a dead socket."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from rtgate.server import create_app
from rtgate.tiers.fake import FakeTier
from tests.server.server_helpers import fake_gate, server_only_config


def _client() -> TestClient:
    gate = fake_gate([FakeTier("local", 50, ["hi"])], local=5.0)
    return TestClient(create_app(server_only_config(), gate=gate, warmup=False))


def test_a_binary_frame_gets_an_error_then_close_1003() -> None:
    with _client() as client, client.websocket_connect("/v1/ws") as ws:
        ws.send_bytes(b'{"seq": 1, "input": "hi"}')
        msg = ws.receive_json()
        assert msg["type"] == "error"
        assert msg["error"]["code"] == "unsupported_frame"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 1003


def test_an_oversized_frame_gets_close_1009() -> None:
    config = server_only_config()
    config.server.max_body_bytes = 2048
    gate = fake_gate([FakeTier("local", 50, ["hi"])], local=5.0)
    app = create_app(config, gate=gate, warmup=False)
    with TestClient(app) as client, client.websocket_connect("/v1/ws") as ws:
        ws.send_text('{"seq": 1, "input": "' + "x" * 4096 + '"}')
        assert ws.receive_json()["error"]["code"] == "body_too_large"
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_json()
        assert closed.value.code == 1009


def test_deeply_nested_json_is_an_error_and_the_session_goes_on() -> None:
    with _client() as client, client.websocket_connect("/v1/ws") as ws:
        ws.send_text("[" * 5000 + "]" * 5000)
        msg = ws.receive_json()
        assert msg["type"] == "error" and "nested" in msg["error"]["message"]
        ws.send_json({"seq": 1, "input": "hi", "budget_ms": 1000})
        kinds: list[str] = []
        while not kinds or kinds[-1] != "answer":
            kinds.append(ws.receive_json()["type"])
        assert "answer" in kinds
