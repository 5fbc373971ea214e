"""Errors are JSON with a code and a message, never a stack trace; bodies are capped;
other applications mount their own routers."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import pytest
from fastapi import APIRouter, Depends, FastAPI

from rtgate.config.loader import Config
from rtgate.server import ServerState
from rtgate.server.state import state
from tests.server.server_helpers import running


def app_router() -> APIRouter:
    """What an application (autocomplete, voice) would mount."""
    seen: dict[str, bool] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        seen["gate_ready"] = get_state_of(app) is not None
        yield

    router = APIRouter(lifespan=lifespan)

    @router.get("/v1/complete")
    async def complete(st: Annotated[ServerState, Depends(state)]) -> dict[str, object]:
        return {"tiers": [t.name for t in st.gate.tiers], **seen}

    @router.get("/boom")
    async def boom() -> None:
        raise RuntimeError("secret internals at /srv/app.py line 3")

    return router


def get_state_of(app: FastAPI) -> ServerState | None:
    return app.state.rtgate  # type: ignore[no-any-return]


async def test_extra_router_is_mounted_with_its_lifespan_and_the_gate() -> None:
    async with running(extra_routers=[app_router()]) as (_, client):
        r = await client.get("/v1/complete")
        assert r.json() == {"tiers": ["cloud", "local", "template"], "gate_ready": True}
        assert "/v1/complete" in (await client.get("/openapi.json")).json()["paths"]


async def test_router_named_in_the_config_is_mounted() -> None:
    cfg = Config()
    cfg.server.routers = [f"{__name__}:app_router"]
    cfg.server.discover_routers = False
    async with running(config=cfg) as (_, client):
        assert (await client.get("/v1/complete")).status_code == 200


def test_bad_router_spec_is_a_config_error() -> None:
    from rtgate.core.errors import ConfigError
    from rtgate.server import create_app

    cfg = Config()
    cfg.server.routers = ["no_such_module_xyz:router"]
    with pytest.raises(ConfigError, match=r"cannot load 'no_such_module_xyz:router'"):
        create_app(cfg)
    cfg.server.routers = ["just-a-name"]
    with pytest.raises(ConfigError, match=r"not 'package\.module:attribute'"):
        create_app(cfg)


async def test_unexpected_exception_is_500_without_internals(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the error shield answers with a reference id; the traceback goes to the log only
    async with running(extra_routers=[app_router()]) as (_, client):
        r = await client.get("/boom")
    assert r.status_code == 500
    err = r.json()["error"]
    assert (err["code"], err["type"]) == ("internal_error", "server_error")
    ref = re.fullmatch(r"internal error \(reference ([0-9a-f]{8})\)", err["message"])
    assert ref is not None
    assert "secret" not in r.text and "Traceback" not in r.text
    logged = [rec for rec in caplog.records if ref.group(1) in rec.getMessage()]
    assert logged and logged[0].exc_info is not None  # the log has what the client has not


@pytest.mark.parametrize(
    ("body", "param", "fragment"),
    [
        ({"input": ""}, "input", "at least 1 character"),
        ({"input": "x", "budget_ms": -1}, "budget_ms", "greater than 0"),
        ({"input": "x", "bogus": 1}, "bogus", "Extra inputs"),
        ({"budget_ms": 5}, "input", "Field required"),
        ([1, 2], None, "JSON object"),
    ],
)
async def test_validation_errors(body: object, param: str | None, fragment: str) -> None:
    async with running() as (_, client):
        r = await client.post("/v1/gate", json=body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == "invalid_request" and err["type"] == "invalid_request_error"
    assert err.get("param") == param
    assert fragment in err["message"]


async def test_malformed_json() -> None:
    async with running() as (_, client):
        r = await client.post(
            "/v1/gate", content=b'{"input": ', headers={"content-type": "application/json"}
        )
    assert r.status_code == 400
    assert "not valid JSON" in r.json()["error"]["message"]


async def test_bad_budget_header() -> None:
    async with running() as (_, client):
        r = await client.post("/v1/gate", json={"input": "x"}, headers={"X-Budget-Ms": "soon"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_budget"
        r = await client.post("/v1/gate", json={"input": "x", "budget_ms": 200_000})
        assert r.status_code == 400 and "120000" in r.json()["error"]["message"]


async def test_body_over_the_limit_by_content_length() -> None:
    cfg = Config()
    cfg.server.max_body_bytes = 2048
    async with running(config=cfg) as (_, client):
        r = await client.post("/v1/gate", json={"input": "x" * 5000})
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "body_too_large"


async def test_body_over_the_limit_when_streamed_without_length() -> None:
    cfg = Config()
    cfg.server.max_body_bytes = 2048

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"input": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'

    async with running(config=cfg) as (_, client):
        r = await client.post(
            "/v1/gate", content=chunks(), headers={"content-type": "application/json"}
        )
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "body_too_large"


async def test_prompt_length_limit_on_gate_input() -> None:
    cfg = Config()
    cfg.server.max_input_chars = 10
    async with running(config=cfg) as (_, client):
        r = await client.post("/v1/gate", json={"input": "x" * 11})
    assert r.status_code == 400 and r.json()["error"]["code"] == "prompt_too_long"


async def test_unknown_route_and_method_are_json() -> None:
    async with running() as (_, client):
        r = await client.get("/nope")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
        r = await client.get("/v1/gate")
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


async def test_endpoints_refuse_before_start_up() -> None:
    import httpx

    from rtgate.server import create_app

    app = create_app(Config(), warmup=False)  # lifespan not run
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://rtgate"
    ) as client:
        r = await client.get("/healthz")
    assert r.status_code == 503 and r.json()["error"]["code"] == "starting"


async def test_freeze_gc_comes_after_the_routers_start_up() -> None:
    import gc

    class Engine:  # what an application's router builds at start-up
        pass

    made: list[Engine] = []

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        made.append(Engine())
        yield

    def tracked(obj: object) -> bool:  # frozen objects leave the collector's generations
        return any(o is obj for o in gc.get_objects())

    async with running(extra_routers=[APIRouter(lifespan=lifespan)], freeze_gc=True):
        assert made and not tracked(made[0])
    assert tracked(made[0])  # released when the app stops
    async with running(extra_routers=[APIRouter(lifespan=lifespan)]):
        assert tracked(made[1])  # without freeze_gc nothing is frozen
