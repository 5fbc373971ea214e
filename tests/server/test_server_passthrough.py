"""Named upstream models: the official ``openai`` SDK against rtgate (in process) in front
of a real Starlette upstream on a loopback port, which records every request it gets."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import openai
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rtgate.assembly.build import assemble
from rtgate.config.loader import load_config
from rtgate.gate import Gate
from rtgate.server import create_app
from rtgate.server.arrival import ARRIVAL
from rtgate.server.lane import PassthroughLane
from rtgate.server.middleware_stack import server_middleware

TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "lookup", "arguments": '{"q": "hours"}'},
}
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


class Upstream:
    """Answers ``/v1/chat/completions`` as ``mode`` says; records ``(path, body)``."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.received = asyncio.Event()
        self.release = asyncio.Event()
        self.app = Starlette(routes=[Route("/{path:path}", self.handle, methods=["POST"])])
        self.gate: Gate | None = None

    async def handle(self, request: Request) -> Response:
        body = await request.json()
        self.seen.append((request.url.path, body))
        self.received.set()
        if request.url.path != "/v1/chat/completions":
            return JSONResponse({"error": {"message": "no such route"}}, 404)
        if self.mode == "hang":
            await self.release.wait()
        if self.mode == "429":
            err = {"error": {"message": "slow down", "type": "rate_limit", "code": "rl"}}
            return JSONResponse(err, 429, headers={"Retry-After": "7"})
        if self.mode == "503":
            err = {"error": {"message": "overloaded", "type": "server_error"}}
            return JSONResponse(err, 503, headers={"Retry-After": "3"})
        if body.get("stream"):
            chunks = self.broken() if self.mode == "break" else self.chunks(body)
            return StreamingResponse(chunks, media_type="text/event-stream")
        return JSONResponse(self.completion(), headers={"X-Request-Id": "req-up-1", "Server": "up"})

    async def broken(self) -> AsyncIterator[bytes]:
        yield b'data: {"choices": []}\n\n'
        raise RuntimeError("the upstream fell over mid-stream")

    def completion(self) -> dict[str, Any]:
        message = {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]}
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls"}
        return {
            "id": "chatcmpl-upstream-1",
            "object": "chat.completion",
            "created": 1700000000,
            "model": "up-model-2024",
            "choices": [choice],
            "usage": USAGE,
            "system_fingerprint": "fp_up",
        }

    async def chunks(self, body: dict[str, Any]) -> AsyncIterator[bytes]:
        head = {"id": "chatcmpl-up-s", "object": "chat.completion.chunk", "created": 1}
        head["model"] = "up-model-2024"
        deltas = [({"role": "assistant", "content": "Hel"}, None), ({"content": "lo"}, "stop")]
        for delta, finish in deltas:
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            yield f"data: {json.dumps({**head, 'choices': [choice]})}\n\n".encode()
        if (body.get("stream_options") or {}).get("include_usage"):
            yield f"data: {json.dumps({**head, 'choices': [], 'usage': USAGE})}\n\n".encode()
        yield b"data: [DONE]\n\n"


@asynccontextmanager
async def serving(app: Any) -> AsyncIterator[int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    started = asyncio.Event()
    serve = server.startup

    async def startup(sockets: Any = None) -> None:
        await serve(sockets)
        started.set()

    server.startup = startup  # type: ignore[method-assign]
    task = asyncio.create_task(server.serve(sockets=[sock]))
    await started.wait()
    try:
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        await task
        sock.close()


def _config(port: int, tier_settings: str = "") -> str:
    """rtgate with one named upstream, ``up`` (model ``up-model``), on ``port``."""
    return (
        "[server]\ndiscover_routers = false\n[local]\nenabled = false\n"
        '[cloud]\nenabled = false\n[tiers.up]\nkind = "openai"\n'
        f'base_url = "http://127.0.0.1:{port}/v1"\nmodel = "up-model"\n{tier_settings}'
    )


def _is_lane(cls: object) -> bool:
    return cls is PassthroughLane


class Waited:
    """Stamps each request as if it had arrived ``ms`` ago (a process that fell behind)."""

    def __init__(self, app: Any, ms: float) -> None:
        self.app, self.ms = app, ms

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            arrived = asyncio.get_running_loop().time() - self.ms / 1000.0
            scope.setdefault("state", {})[ARRIVAL] = arrived
        await self.app(scope, receive, send)


@asynccontextmanager
async def gateway(
    tmp_path: Path,
    *,
    warmup: bool = False,
    lane: bool = True,
    waited_ms: float = 0.0,
    tier_settings: str = "",
) -> AsyncIterator[tuple[Upstream, openai.AsyncOpenAI, httpx.AsyncClient]]:
    """rtgate in front of a recording upstream; ``lane=False``: without the passthrough
    lane (the routed path answers); ``waited_ms``: every request arrived that long ago."""
    up = Upstream()
    async with serving(up.app) as port:
        toml = tmp_path / "rtgate.toml"
        toml.write_text(_config(port, tier_settings))
        config = load_config(toml, env={})
        stack = [m for m in server_middleware(config) if lane or not _is_lane(m.cls)]
        if waited_ms:
            stack.insert(0, Middleware(Waited, ms=waited_ms))
        asm = assemble(config)
        app = create_app(config, assembly=asm, warmup=warmup, middleware=stack)
        up.gate = asm.gate  # the gate in front of it, for what it learns
        try:
            async with app.router.lifespan_context(app):
                raw = httpx.AsyncClient(
                    transport=httpx.ASGITransport(app=app), base_url="http://rt"
                )
                # the SDK's own HTTP client type (this openai release is built on httpx2)
                inner = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
                sdk = openai.AsyncOpenAI(
                    base_url="http://rt/v1", api_key="k", http_client=inner, max_retries=0
                )
                async with raw, inner:
                    yield up, sdk, raw
        finally:
            up.release.set()


FIELDS: dict[str, Any] = {
    "temperature": 0.3,
    "top_p": 0.9,
    "seed": 42,
    "stop": ["\n\n"],
    "n": 1,
    "user": "u-1",
    "logprobs": False,
    "response_format": {"type": "json_object"},
    "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
    "tool_choice": "auto",
}
MESSAGES: list[Any] = [{"role": "user", "content": "hours?"}]


async def test_fields_go_upstream_unchanged_and_the_answer_comes_back(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (up, sdk, _):
        got = await sdk.chat.completions.with_raw_response.create(
            model="up",
            messages=MESSAGES,
            extra_body={"budget_ms": 5000, "delegate": False},
            **FIELDS,
        )
    path, body = up.seen[0]
    assert path == "/v1/chat/completions"
    assert body == {"model": "up-model", "messages": MESSAGES, **FIELDS}  # nothing added
    assert got.headers["x-rtgate-route"] == "up"
    c = got.parse()
    assert (c.id, c.model, c.system_fingerprint) == (
        "chatcmpl-upstream-1",
        "up-model-2024",
        "fp_up",
    )
    assert c.choices[0].finish_reason == "tool_calls"
    assert c.choices[0].message.tool_calls is not None
    assert c.choices[0].message.tool_calls[0].model_dump() == TOOL_CALL
    assert c.usage is not None and c.usage.model_dump(exclude_none=True) == USAGE


async def test_streamed_with_usage_chunk_by_upstream_model_name(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (up, sdk, _):
        stream = await sdk.chat.completions.create(
            model="up-model",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
            seed=7,
        )
        chunks = [c async for c in stream]
    body = up.seen[0][1]
    assert body == {
        "model": "up-model",
        "messages": MESSAGES,
        "stream": True,
        "stream_options": {"include_usage": True},
        "seed": 7,
    }
    assert {c.id for c in chunks} == {"chatcmpl-up-s"}
    assert {c.model for c in chunks} == {"up-model-2024"}
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello"
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, "stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 18


async def test_no_stream_asked_none_sent(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (up, sdk, _):
        await sdk.chat.completions.create(model="up", messages=MESSAGES)
    assert "stream" not in up.seen[0][1] and "temperature" not in up.seen[0][1]


async def test_a_named_model_past_its_budget_is_a_504(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (up, sdk, _):
        up.mode = "hang"
        with pytest.raises(openai.APIStatusError) as err:
            await sdk.chat.completions.create(
                model="up", messages=MESSAGES, extra_body={"budget_ms": 30}
            )
        assert up.received.is_set()
    assert err.value.status_code == 504
    assert isinstance(err.value.body, dict) and err.value.body["code"] == "upstream_timeout"


async def test_the_placeholder_only_when_asked(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (up, sdk, _):
        up.mode = "hang"
        c = await sdk.chat.completions.create(
            model="up",
            messages=MESSAGES,
            extra_body={"budget_ms": 30, "rtgate": {"on_timeout": "placeholder"}},
        )
        sent = up.seen[0][1]
    assert "rtgate" not in sent and "budget_ms" not in sent
    assert c.choices[0].message.content == "One moment, a fuller answer is on its way."
    extra = c.model_extra or {}
    assert extra["rtgate"]["placeholder"] is True
    assert extra["rtgate"]["degraded"].startswith("upstream_timeout")


async def test_upstream_429_is_passed_through_with_retry_after(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (up, sdk, _):
        up.mode = "429"
        with pytest.raises(openai.RateLimitError) as err:
            await sdk.chat.completions.create(model="up", messages=MESSAGES)
    assert err.value.response.headers["retry-after"] == "7"
    assert isinstance(err.value.body, dict) and err.value.body["message"] == "slow down"


async def test_models_lists_auto_and_the_named_upstreams(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (_, sdk, _raw):
        ids = [m.id async for m in sdk.models.list()]
        with pytest.raises(openai.NotFoundError):
            await sdk.chat.completions.create(model="nope", messages=MESSAGES)
    assert ids == ["auto", "up", "up-model"]


async def test_warm_up_and_health_use_chat_completions_only(tmp_path: Path) -> None:
    async with gateway(tmp_path, warmup=True) as (up, _, raw):
        health = (await raw.get("/healthz")).json()
    assert health["status"] == "ok"
    assert up.seen and {path for path, _ in up.seen} == {"/v1/chat/completions"}


@pytest.mark.parametrize(
    "request_body",
    [
        {"model": "up", "messages": MESSAGES, "seed": 1},
        {"model": "up", "messages": MESSAGES, "temperature": 5},  # refused by the schema
        {"model": "up", "messages": [], "budget_ms": 100},  # refused: no messages
        {"model": "up", "messages": MESSAGES, "budget_ms": -1},  # refused: the budget
        {"model": "up", "messages": MESSAGES, "rtgate": {"on_timeout": "x"}},  # refused
        {"model": "up", "messages": MESSAGES, "max_tokens": 10**9},  # over the server's cap
        {"model": "nope", "messages": MESSAGES},  # unknown model
    ],
)
async def test_the_lane_and_the_routed_path_answer_alike(
    tmp_path: Path, request_body: dict[str, Any]
) -> None:
    got = []
    for lane in (True, False):
        async with gateway(tmp_path, lane=lane) as (up, _, raw):
            resp = await raw.post("/v1/chat/completions", json=request_body)
            got.append((resp.status_code, resp.json(), resp.headers.get("x-rtgate-route"), up.seen))
    assert got[0] == got[1]
    assert (got[0][0] == 200) == (request_body.get("seed") == 1)


async def test_upstream_headers_come_back_once(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (_, _sdk, raw):
        resp = await raw.post("/v1/chat/completions", json={"model": "up", "messages": MESSAGES})
    assert resp.headers["x-request-id"] == "req-up-1"
    assert "date" not in resp.headers and "server" not in resp.headers  # the server's own
    assert resp.headers["content-length"] == str(len(resp.content))


async def test_upstream_503_is_a_503_with_its_retry_after(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (up, sdk, _):
        up.mode = "503"
        with pytest.raises(openai.APIStatusError) as err:
            await sdk.chat.completions.create(model="up", messages=MESSAGES)
    assert err.value.status_code == 503
    assert err.value.response.headers["retry-after"] == "3"
    assert isinstance(err.value.body, dict) and err.value.body["code"] == "upstream_unavailable"


async def test_an_upstream_that_is_down_is_a_502(tmp_path: Path) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there
    toml = tmp_path / "rtgate.toml"
    toml.write_text(_config(port))
    config = load_config(toml, env={})
    app = create_app(config, assembly=assemble(config), warmup=False)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rt") as raw:
            resp = await raw.post(
                "/v1/chat/completions", json={"model": "up", "messages": MESSAGES}
            )
    assert resp.status_code == 502
    assert resp.json()["error"]["code"] == "upstream_error"


async def test_a_stream_that_breaks_ends_with_an_error_event(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (up, _sdk, raw):
        up.mode = "break"
        body = {"model": "up", "messages": MESSAGES, "stream": True}
        resp = await raw.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200
    events = [e for e in resp.text.split("\n\n") if e]
    assert events[0] == 'data: {"choices": []}'
    assert json.loads(events[-1].removeprefix("data: "))["error"]["code"] == "upstream_error"


@pytest.mark.parametrize("lane", [True, False])
async def test_a_request_that_waited_too_long_is_refused_not_sent(
    tmp_path: Path, lane: bool
) -> None:
    async with gateway(tmp_path, lane=lane, waited_ms=400) as (up, sdk, _):  # > max_queue_ms
        with pytest.raises(openai.APIStatusError) as err:
            await sdk.chat.completions.create(model="up", messages=MESSAGES)
        c = await sdk.chat.completions.create(
            model="up", messages=MESSAGES, extra_body={"rtgate": {"on_timeout": "placeholder"}}
        )
    assert up.seen == []  # never sent late
    assert err.value.status_code == 503
    assert err.value.response.headers["retry-after"] == "1"
    assert isinstance(err.value.body, dict) and err.value.body["code"] == "overloaded"
    extra = c.model_extra or {}
    assert extra["rtgate"]["placeholder"] is True
    assert extra["rtgate"]["degraded"].startswith("overloaded")


async def test_passthrough_answers_teach_the_gate_the_upstream_latency(tmp_path: Path) -> None:
    async with gateway(tmp_path) as (up, sdk, _):
        assert up.gate is not None
        model = up.gate.models["up"]
        assert model.cold
        await sdk.chat.completions.create(model="up", messages=MESSAGES)
        stream = await sdk.chat.completions.create(model="up", messages=MESSAGES, stream=True)
        _ = [c async for c in stream]
        assert not model.cold and model.ttft.count == 2 and model.total.count == 2
        assert 0 < model.predict_ttft("p50") <= model.predict_total("p99") < 10_000


async def test_an_upstream_can_default_to_the_placeholder_and_a_request_overrides_it(
    tmp_path: Path,
) -> None:
    async with gateway(tmp_path, tier_settings='on_timeout = "placeholder"\n') as (up, sdk, _):
        up.mode = "hang"
        c = await sdk.chat.completions.create(
            model="up", messages=MESSAGES, extra_body={"budget_ms": 30}
        )
        with pytest.raises(openai.APIStatusError) as err:
            await sdk.chat.completions.create(
                model="up",
                messages=MESSAGES,
                extra_body={"budget_ms": 30, "rtgate": {"on_timeout": "error"}},
            )
    assert (c.model_extra or {})["rtgate"]["placeholder"] is True
    assert err.value.status_code == 504
