"""One set of text rules on every entry point: the same 400 shape, the text never reaches
a tier, and bad text cannot open a backend's circuit breaker."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from rtgate.core.errors import InvalidRequest
from rtgate.core.text_rules import check_text
from rtgate.server import create_app
from rtgate.tiers.fake import FakeTier
from tests.server.server_helpers import fake_gate, running, server_only_config

LONE = '"\\ud800"'  # a lone surrogate, as JSON can carry it


@pytest.mark.parametrize("bad", ["\ud800", "a\udfffb", "nul\x00", "bell\x07", "c1\x85"])
def test_check_text_refuses(bad: str) -> None:
    with pytest.raises(InvalidRequest, match="not allowed") as e:
        check_text(bad, "input")
    assert bad not in str(e.value)


@pytest.mark.parametrize("good", ["tab\tnew\nline\r", "שלום עולם", "家\u200d人", "é"])
def test_check_text_allows(good: str) -> None:
    assert check_text(good, "input") == good


_USER = '{"role": "user", "content": '
_CHAT = '{"model": "auto", "messages": ['


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/gate", '{"input": ' + LONE + "}"),
        ("/v1/chat/completions", _CHAT + _USER + LONE + "}]}"),
        ("/v1/chat/completions", _CHAT + _USER + '"hi"}], "stop": [' + LONE + "]}"),
    ],
)
async def test_http_routes_refuse_a_lone_surrogate_alike(path: str, body: str) -> None:
    tier = FakeTier("local", 50, ["ok"])
    async with running(fake_gate([tier], local=5.0)) as (_, client):
        r = await client.post(
            path, content=body.encode(), headers={"content-type": "application/json"}
        )
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "invalid_request" and err["type"] == "invalid_request_error"
    assert "surrogate" in err["message"] or "unicode" in err["message"]
    assert tier.calls == 0


def test_the_websocket_refuses_a_lone_surrogate() -> None:
    tier = FakeTier("local", 50, ["ok"])
    app = create_app(server_only_config(), gate=fake_gate([tier], local=5.0), warmup=False)
    with TestClient(app) as client, client.websocket_connect("/v1/ws") as ws:
        ws.send_text('{"seq": 1, "input": ' + LONE + "}")
        msg = ws.receive_json()
        assert msg["type"] == "error" and "surrogate" in msg["error"]["message"]
        ws.send_text(json.dumps({"seq": 2, "input": "hi"}))
        while (msg := ws.receive_json())["type"] != "answer":
            pass
    assert tier.calls == 1
