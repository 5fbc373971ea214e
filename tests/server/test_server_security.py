"""The ``[security]`` section wired into the server: API keys with per-key caps and rate
limits on every /v1 route (HTTP and WebSocket), open ops paths, CORS, one body limit, an
open server that says so, and secrets masked in the logs."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.testclient import TestClient, WebSocketDenialResponse

from rtgate.config.loader import Config, load_config
from rtgate.core.errors import ConfigError
from rtgate.security import BodyLimitMiddleware, KeyPolicy, KeyStore, RedactingFilter
from rtgate.security.keys import PEPPER_ENV
from rtgate.server import create_app
from rtgate.server.middleware_stack import OPEN_NOTE, server_middleware
from tests.server.server_helpers import fake_gate

PEPPER = "pepper-for-the-tests-0123456789"


class Clock:
    """A clock the test moves (the keys' token buckets read it)."""

    t = 0.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A key store on disk with a plain key and a capped one; returns the file and keys."""
    store = KeyStore(PEPPER)
    plain, _ = store.create("plain", KeyPolicy(rate_per_s=1.0, burst=3))
    capped, _ = store.create("capped", KeyPolicy(max_budget_ms=500, max_tokens=16))
    path = tmp_path / "keys.json"
    store.save(path)
    return path, {"plain": plain, "capped": capped}


def keyed_config(path: Path, **env: str) -> Config:
    return load_config(env={"RTGATE_SECURITY_API_KEYS_FILE": str(path), PEPPER_ENV: PEPPER, **env})


@asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rtgate") as client:
            yield client


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


GATE = {"input": "hi", "budget_ms": 300, "delegate": False}
CHAT = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "budget_ms": 100}


@pytest.mark.looptime
async def test_without_keys_the_server_is_open_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = create_app(load_config(env={}), gate=fake_gate(), warmup=False)
    with caplog.at_level(logging.WARNING, "rtgate.server"):
        async with serving(app) as client:
            health = (await client.get("/healthz")).json()
            r = await client.post("/v1/gate", json=GATE)
    assert r.status_code == 200
    assert health["auth"] == "open" and OPEN_NOTE in health["notes"]
    assert any("the server is OPEN" in rec.getMessage() for rec in caplog.records)
    classes = [m.cls for m in app.user_middleware]
    limits = [c for c in classes if isinstance(c, type) and issubclass(c, BodyLimitMiddleware)]
    assert len(limits) == 1  # the security stack's body limit is the only one


@pytest.mark.looptime
async def test_with_keys_every_v1_route_needs_one_and_ops_stay_open(
    keys: tuple[Path, dict[str, str]],
) -> None:
    path, k = keys
    app = create_app(keyed_config(path), gate=fake_gate(), warmup=False)
    async with serving(app) as client:
        refused = [
            await client.post("/v1/gate", json=GATE),
            await client.post("/v1/chat/completions", json=CHAT),
            await client.get("/v1/models"),
            await client.get("/v1/jobs/job-x"),
        ]
        wrong = await client.post("/v1/gate", json=GATE, headers=bearer("rtg_" + "x" * 43))
        ok = await client.post("/v1/gate", json=GATE, headers=bearer(k["plain"]))
        via_header = await client.get("/v1/models", headers={"X-API-Key": k["plain"]})
        health = await client.get("/healthz")
        metrics = await client.get("/metrics")
    assert [r.status_code for r in refused] == [401] * 4
    assert {r.json()["error"]["code"] for r in refused} == {"missing_api_key"}
    assert refused[0].headers["www-authenticate"] == "Bearer"
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    assert ok.status_code == 200 and ok.json()["route"] == "local"
    assert via_header.status_code == 200
    assert health.status_code == 200 and metrics.status_code == 200
    body = health.json()
    assert body["auth"] == "api_keys" and OPEN_NOTE not in body["notes"]


@pytest.mark.looptime
async def test_per_key_caps_refuse_what_asks_for_more(keys: tuple[Path, dict[str, str]]) -> None:
    path, k = keys
    app = create_app(keyed_config(path), gate=fake_gate(), warmup=False)
    h = bearer(k["capped"])
    async with serving(app) as client:
        over_budget = await client.post("/v1/gate", json={**GATE, "budget_ms": 1000}, headers=h)
        over_header = await client.post(
            "/v1/gate", json={"input": "hi"}, headers={**h, "X-Budget-Ms": "900"}
        )
        over_tokens = await client.post("/v1/gate", json={**GATE, "max_tokens": 32}, headers=h)
        chat_over = await client.post(
            "/v1/chat/completions", json={**CHAT, "max_tokens": 17}, headers=h
        )
        defaulted = await client.post(
            "/v1/gate", json={"input": "hi", "delegate": False}, headers=h
        )
        within = await client.post("/v1/gate", json={**GATE, "max_tokens": 16}, headers=h)
    for r in (over_budget, over_header, over_tokens, chat_over):
        assert r.status_code == 400 and r.json()["error"]["code"] == "key_limit_exceeded"
    assert "above this key's limit of 500" in over_budget.json()["error"]["message"]
    assert "max_tokens 17" in chat_over.json()["error"]["message"]
    # asked for nothing: the server default (1000 ms) is capped at the key's 500 ms
    assert defaulted.status_code == 200 and defaulted.json()["trace"]["budget_ms"] == 500
    assert within.status_code == 200


@pytest.mark.looptime
async def test_a_keys_rate_limit_answers_429(keys: tuple[Path, dict[str, str]]) -> None:
    path, k = keys
    cfg = keyed_config(path)
    clock = Clock()
    store = KeyStore.load(path, PEPPER, clock=clock)
    app = create_app(cfg, gate=fake_gate(), warmup=False, middleware=server_middleware(cfg, store))
    async with serving(app) as client:
        codes = [
            (await client.post("/v1/gate", json=GATE, headers=bearer(k["plain"]))).status_code
            for _ in range(4)
        ]
        limited = await client.post("/v1/gate", json=GATE, headers=bearer(k["plain"]))
        clock.t += 1.0  # one token back at 1/s
        again = await client.post("/v1/gate", json=GATE, headers=bearer(k["plain"]))
    assert codes == [200, 200, 200, 429]  # burst of 3
    assert limited.status_code == 429 and limited.headers["retry-after"] == "1"
    assert again.status_code == 200


@pytest.mark.looptime
async def test_cors_allow_list(keys: tuple[Path, dict[str, str]]) -> None:
    path, _ = keys
    cfg = keyed_config(path, RTGATE_SECURITY_CORS_ORIGINS="https://app.example.com")
    app = create_app(cfg, gate=fake_gate(), warmup=False)
    preflight = {"Access-Control-Request-Method": "POST"}
    async with serving(app) as client:
        ok = await client.options(
            "/v1/gate", headers={"Origin": "https://app.example.com", **preflight}
        )
        evil = await client.options(
            "/v1/gate", headers={"Origin": "https://evil.example", **preflight}
        )
        unauth = await client.post(
            "/v1/gate", json=GATE, headers={"Origin": "https://app.example.com"}
        )
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == "https://app.example.com"
    assert evil.status_code == 400 and "access-control-allow-origin" not in evil.headers
    # a refused request still carries CORS headers, so the browser app can read the 401
    assert unauth.status_code == 401
    assert unauth.headers["access-control-allow-origin"] == "https://app.example.com"


@pytest.fixture
def ws_client(keys: tuple[Path, dict[str, str]]) -> Iterator[tuple[TestClient, dict[str, str]]]:
    path, k = keys
    cfg = keyed_config(path)
    store = KeyStore.load(path, PEPPER, clock=Clock())  # frozen clock: no refill
    app = create_app(cfg, gate=fake_gate(), warmup=False, middleware=server_middleware(cfg, store))
    with TestClient(app) as client:
        yield client, k


def test_websocket_needs_a_key_and_each_message_is_checked(
    ws_client: tuple[TestClient, dict[str, str]],
) -> None:
    client, k = ws_client
    with pytest.raises(WebSocketDenialResponse) as denied:
        with client.websocket_connect("/v1/ws"):
            pass
    assert denied.value.status_code == 401
    out: list[dict[str, Any]] = []
    with client.websocket_connect(f"/v1/ws?api_key={k['capped']}") as ws:
        ws.send_json({"seq": 1, "input": "hi", "budget_ms": 900})
        out.append(ws.receive_json())
        ws.send_json({"seq": 2, "input": "hi", "budget_ms": 300, "stream": False})
        out.append(ws.receive_json())
    assert out[0]["type"] == "error" and out[0]["error"]["code"] == "key_limit_exceeded"
    assert out[1]["type"] == "answer" and out[1]["seq"] == 2
    with client.websocket_connect("/v1/ws", headers=bearer(k["plain"])) as ws:  # burst 3
        replies = []
        for seq in range(1, 4):  # the handshake took one token: two messages go through
            ws.send_json({"seq": seq, "input": "hi", "budget_ms": 100, "stream": False})
            replies.append(ws.receive_json())
    assert [r["type"] for r in replies] == ["answer", "answer", "error"]
    assert replies[2]["error"]["code"] == "rate_limited" and replies[2]["seq"] == 3


def test_security_config_errors(tmp_path: Path) -> None:
    store = tmp_path / "keys.json"
    KeyStore(PEPPER).save(store)
    with pytest.raises(ConfigError, match=PEPPER_ENV):
        load_config(env={"RTGATE_SECURITY_API_KEYS_FILE": str(store)})
    with pytest.raises(ConfigError, match="no such key store"):
        load_config(env={"RTGATE_SECURITY_API_KEYS_FILE": str(tmp_path / "no.json")})
    with pytest.raises(ConfigError, match="list the exact origins"):
        load_config(env={"RTGATE_SECURITY_CORS_ORIGINS": "*"})
    toml = tmp_path / "rtgate.toml"
    toml.write_text('[security]\nkey_pepper = "in-a-file"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="key_pepper is not read from files"):
        load_config(toml, env={})
    cfg = load_config(env={"RTGATE_SECURITY_API_KEYS_FILE": str(store), PEPPER_ENV: PEPPER})
    assert cfg.security.key_pepper is not None
    assert PEPPER not in repr(cfg) and PEPPER not in str(cfg.redacted())
    assert cfg.redacted()["security"]["key_pepper_set"] is True


def test_serve_masks_secrets_in_the_logs(tmp_path: Path) -> None:
    from rtgate.cli.serve import build_server

    env = {
        "RTGATE_LOCAL_ENABLED": "false",
        "RTGATE_CLOUD_BASE_URL": "http://127.0.0.1:9/v1",
        "RTGATE_CLOUD_MODEL": "m",
        "RTGATE_CLOUD_API_KEY": "cloud-secret-value-123",
        "RTGATE_SERVER_LOG_LEVEL": "warning",
    }
    build_server(load_config(env=env))
    handlers = logging.getLogger("uvicorn").handlers + logging.getLogger("").handlers
    filters = [f for h in handlers for f in h.filters if isinstance(f, RedactingFilter)]
    try:
        assert filters, "redaction is installed on the handlers uvicorn configured"
        record = logging.LogRecord(
            "uvicorn.error", logging.ERROR, __file__, 1,
            "upstream said %s with Authorization: Bearer %s",
            ("cloud-secret-value-123", "rtg_abcdefghijklmnop"), None,
        )  # fmt: skip
        assert filters[0].filter(record)
        text = record.getMessage()
        assert "cloud-secret-value-123" not in text and "rtg_abcdefghijklmnop" not in text
        assert "***" in text
    finally:
        for h in handlers:
            for f in [f for f in h.filters if isinstance(f, RedactingFilter)]:
                h.removeFilter(f)
