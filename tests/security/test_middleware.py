"""The security middleware on a real Starlette app through httpx's ASGI transport."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route, WebSocketRoute
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocket

from rtgate.core.errors import QueueFull
from rtgate.security import (
    APIKeyMiddleware,
    BodyLimitMiddleware,
    ErrorShieldMiddleware,
    KeyPolicy,
    KeyStore,
    cors_options,
)


class Clock:
    t = 0.0

    def __call__(self) -> float:
        return self.t


async def whoami(request: Request) -> JSONResponse:
    rec = request.state.api_key
    return JSONResponse({"key_id": rec.key_id, "name": rec.name})


async def echo(request: Request) -> JSONResponse:
    return JSONResponse({"n": len(await request.body())})


async def boom(request: Request) -> JSONResponse:
    raise RuntimeError("secret internals at /srv/app.py line 42")


async def full(request: Request) -> JSONResponse:
    raise QueueFull("delegation queue full")


async def healthz(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


async def ws(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_json({"name": websocket.state.api_key.name})
    await websocket.close()


def build(store: KeyStore) -> Starlette:
    return Starlette(
        routes=[
            Route("/v1/whoami", whoami),
            Route("/v1/echo", echo, methods=["POST"]),
            Route("/v1/boom", boom),
            Route("/v1/full", full),
            Route("/healthz", healthz),
            WebSocketRoute("/v1/ws", ws),
        ],
        middleware=[
            Middleware(ErrorShieldMiddleware),
            Middleware(CORSMiddleware, **cors_options(["https://app.example.com"])),
            Middleware(BodyLimitMiddleware, max_bytes=1000),
            Middleware(APIKeyMiddleware, store=store),
        ],
    )


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> KeyStore:
    return KeyStore("p" * 32, clock=clock)


@pytest.fixture
async def client(store: KeyStore) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=build(store), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        yield c


def error_of(resp: httpx.Response | WebSocketDenialResponse) -> dict[str, str]:
    body = resp.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "type"}
    return dict(body["error"])


async def test_both_headers_authenticate(client: httpx.AsyncClient, store: KeyStore) -> None:
    key, rec = store.create("alice")
    r1 = await client.get("/v1/whoami", headers={"Authorization": f"Bearer {key}"})
    r2 = await client.get("/v1/whoami", headers={"X-API-Key": key})
    assert r1.status_code == r2.status_code == 200
    assert r1.json() == {"key_id": rec.key_id, "name": "alice"}


async def test_missing_and_invalid_keys_get_clear_401s(
    client: httpx.AsyncClient, store: KeyStore
) -> None:
    r = await client.get("/v1/whoami")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert error_of(r) | {"message": ""} == {
        "code": "missing_api_key",
        "message": "",
        "type": "authentication_error",
    }
    r = await client.get("/v1/whoami", headers={"Authorization": "Bearer rtg_nope"})
    assert r.status_code == 401 and error_of(r)["code"] == "invalid_api_key"
    r = await client.get("/v1/whoami", headers={"Authorization": "Basic dXNlcjpwYXNz"})
    assert error_of(r)["code"] == "missing_api_key"
    assert (await client.get("/healthz")).status_code == 200  # exempt


async def test_rate_limit_gives_429_with_retry_after(
    client: httpx.AsyncClient, store: KeyStore, clock: Clock
) -> None:
    key, _ = store.create("burst", KeyPolicy(rate_per_s=0.5, burst=2))
    other, _ = store.create("other", KeyPolicy(rate_per_s=0.5, burst=2))
    h = {"X-API-Key": key}
    codes = [(await client.get("/v1/whoami", headers=h)).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    r = await client.get("/v1/whoami", headers=h)
    assert r.headers["retry-after"] == "2" and error_of(r)["code"] == "rate_limited"
    assert (await client.get("/v1/whoami", headers={"X-API-Key": other})).status_code == 200
    clock.t += 2.0
    assert (await client.get("/v1/whoami", headers=h)).status_code == 200


async def test_body_limit_by_header_and_by_stream(
    client: httpx.AsyncClient, store: KeyStore
) -> None:
    key, _ = store.create("b")
    h = {"X-API-Key": key}
    assert (await client.post("/v1/echo", content=b"x" * 1000, headers=h)).json() == {"n": 1000}
    r = await client.post("/v1/echo", content=b"x" * 1001, headers=h)
    assert r.status_code == 413 and error_of(r)["code"] == "body_too_large"

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"y" * 300

    r = await client.post("/v1/echo", content=chunks(), headers=h)
    assert r.status_code == 413


async def test_unhandled_errors_are_json_without_a_stack_trace(
    client: httpx.AsyncClient, store: KeyStore, caplog: pytest.LogCaptureFixture
) -> None:
    key, _ = store.create("e")
    with caplog.at_level(logging.ERROR, "rtgate.security"):
        r = await client.get("/v1/boom", headers={"X-API-Key": key})
    assert r.status_code == 500
    err = error_of(r)
    assert err["code"] == "internal_error" and "reference" in err["message"]
    assert "Traceback" not in r.text and "/srv/app.py" not in r.text
    assert "RuntimeError" in caplog.text  # the traceback went to the log instead
    r = await client.get("/v1/full", headers={"X-API-Key": key})
    assert r.status_code == 503 and error_of(r)["code"] == "queue_full"


async def test_cors_preflight_needs_no_key_and_only_listed_origins_pass(
    client: httpx.AsyncClient,
) -> None:
    pre = {"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "x-api-key"}
    ok = await client.options("/v1/echo", headers={"Origin": "https://app.example.com", **pre})
    assert ok.status_code == 200
    assert ok.headers["access-control-allow-origin"] == "https://app.example.com"
    bad = await client.options("/v1/echo", headers={"Origin": "https://evil.example", **pre})
    assert bad.status_code == 400 and "access-control-allow-origin" not in bad.headers


def test_websocket_key_in_query_and_refusal(store: KeyStore) -> None:
    key, _ = store.create("ws-user")
    with TestClient(build(store)) as tc:
        with tc.websocket_connect(f"/v1/ws?api_key={key}") as conn:
            assert conn.receive_json() == {"name": "ws-user"}
        with pytest.raises(WebSocketDenialResponse) as info:  # a 401 before the handshake
            with tc.websocket_connect("/v1/ws"):
                pass
        assert info.value.status_code == 401
        assert error_of(info.value)["code"] == "missing_api_key"
