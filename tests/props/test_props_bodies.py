"""Properties of request parsing: any body, header or value gives an answer or a clear 4xx,
never a 5xx or an unexpected exception."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pydantic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from rtgate.core.budget import Budget
from rtgate.core.errors import InvalidBudget, InvalidRequest
from rtgate.fakellm import FakeLLMConfig, Timing, create_app, parse_plan
from rtgate.security import APIKeyMiddleware, KeyPolicy, KeyStore, Redactor
from rtgate.security.keys import new_key

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
    max_leaves=20,
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant", "tool", "x"]) | _json},
    optional={"content": st.text(max_size=20) | _json},
)
_chat_body = st.fixed_dictionaries(
    {},
    optional={
        "model": st.text(max_size=8) | _json,
        "messages": st.lists(_message, max_size=3) | _json,
        "prompt": st.text(max_size=10) | _json,
        "stream": st.booleans() | _json,
        "max_tokens": st.integers(-5, 200_000) | _json,
        "max_completion_tokens": st.integers(-5, 10) | _json,
        "budget_ms": st.floats() | _json,
    },
)


def _is_error(resp: httpx.Response) -> bool:
    body = resp.json()
    return isinstance(body.get("error"), dict) and isinstance(body["error"].get("message"), str)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(_chat_body.map(json.dumps), _json.map(json.dumps), st.text(max_size=30)),
    st.sampled_from(["/v1/chat/completions", "/v1/completions"]),
)
def test_fake_llm_answers_any_body_with_2xx_or_a_clear_4xx(body: str, path: str) -> None:
    app = create_app(FakeLLMConfig(timing=Timing(ttft_ms=0, tpot_ms=0, tokens=3)))

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://f") as c:
            return await c.post(
                path, content=body.encode(), headers={"content-type": "application/json"}
            )

    resp = asyncio.run(go())
    assert resp.status_code in (200, 400), resp.text
    if resp.status_code == 400:
        assert _is_error(resp)


from rtgate.server import schemas  # noqa: E402

_MODELS = [schemas.GateBody, schemas.ChatCompletionRequest, schemas.WsRequest]


@settings(max_examples=300, deadline=None)
@given(st.one_of(_chat_body, _json), st.sampled_from(_MODELS))
def test_server_request_models_validate_or_raise_validation_errors(body: Any, model: Any) -> None:
    try:
        model.model_validate(body)
    except pydantic.ValidationError as e:
        assert e.errors()


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.floats(), st.integers(), st.booleans(), st.none(), st.text(max_size=5)))
def test_budget_accepts_a_valid_number_or_says_invalid_budget(value: Any) -> None:
    try:
        b = Budget(value)
    except InvalidBudget as e:
        assert "budget_ms" in str(e)
        return
    assert 0 < b.budget_ms <= 3_600_000


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=80))
def test_fault_spec_parses_or_says_why(spec: str) -> None:
    try:
        plan = parse_plan(spec)
    except InvalidRequest as e:
        assert str(e)
        return
    assert plan.weights and all(w > 0 for _, w in plan.weights)


_header_value = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["authorization", "x-api-key", "cookie"]), _header_value),
        max_size=3,
    ),
    st.booleans(),
)
def test_auth_middleware_any_headers_give_200_401_or_429(
    headers: list[tuple[str, str]], with_valid: bool
) -> None:
    async def ok(request: Request) -> PlainTextResponse:
        return PlainTextResponse("ok")

    store = KeyStore("p" * 32)
    key, _ = store.create("k", KeyPolicy(rate_per_s=1000, burst=1000))
    hdrs = [*headers, ("x-api-key", key)] if with_valid else headers
    app = APIKeyMiddleware(Starlette(routes=[Route("/x", ok)]), store)

    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            return await c.get("/x", headers=hdrs)

    resp = asyncio.run(go())
    assert resp.status_code in (200, 401, 429)
    if resp.status_code != 200:
        assert _is_error(resp)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), st.text(max_size=40), st.sampled_from(["", "Bearer ", "api_key="]))
def test_redaction_removes_any_key_and_is_idempotent(before: str, after: str, lead: str) -> None:
    key = new_key()
    redact = Redactor()
    once = redact(f"{before}{lead}{key} {after}")
    assert key not in once and key[4:] not in once
    assert redact(once) == once
