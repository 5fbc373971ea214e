"""POST /v1/chat/completions and GET /v1/models over httpx, on fake tiers."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rtgate.config.loader import Config
from tests.server.server_helpers import fake_gate, parse_sse, running

pytestmark = pytest.mark.looptime


def chat(content: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": "auto", "messages": [{"role": "user", "content": content}], **extra}


async def test_non_streamed_completion_with_job_header_and_extra_field() -> None:
    async with running() as (_, client):
        r = await client.post("/v1/chat/completions", json=chat(), headers={"X-Budget-Ms": "150"})
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["model"] == "auto"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "quick one"}
    assert choice["finish_reason"] == "stop"
    assert body["rtgate"]["route"] == "local"
    assert body["rtgate"]["job_id"] == r.headers["x-rtgate-job-id"]
    assert body["rtgate"]["trace"]["budget_ms"] == 150.0


async def test_budget_field_and_no_job_when_the_best_tier_fits() -> None:
    async with running() as (_, client):
        r = await client.post("/v1/chat/completions", json=chat(budget_ms=5000))
    body = r.json()
    assert body["choices"][0]["message"]["content"] == "deep answer"
    assert body["rtgate"]["route"] == "cloud" and body["rtgate"]["job_id"] is None
    assert "x-rtgate-job-id" not in r.headers


async def test_streamed_completion_chunks_and_done() -> None:
    async with running() as (_, client):
        r = await client.post("/v1/chat/completions", json=chat(stream=True, budget_ms=150))
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["x-accel-buffering"] == "no"
    events = parse_sse(r.text)
    assert all(e is None for e, _ in events)
    assert events[-1][1] == "[DONE]"
    chunks = [json.loads(d) for _, d in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == "quick one"
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == "stop"
    assert last["rtgate"]["route"] == "local" and last["rtgate"]["job_id"]


async def test_silent_stream_still_sends_the_placeholder_as_content() -> None:
    async with running() as (_, client):
        r = await client.post("/v1/chat/completions", json=chat(stream=True, budget_ms=1))
    chunks = [json.loads(d) for _, d in parse_sse(r.text)[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == Config().gate.placeholder
    assert chunks[-1]["rtgate"]["placeholder"] is True


async def test_conversation_and_parts_are_passed_to_the_model() -> None:
    from rtgate.backends.fake import FakeBackend
    from rtgate.tiers.llm import LLMTier

    backend = FakeBackend(lambda gen: [" | ".join(f"{m.role}:{m.content}" for m in gen.messages)])
    gate = fake_gate([LLMTier(backend, "local", 50, few_shot={}, style="chat")], local=5.0)
    body = {
        "model": "auto",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "he"}, {"type": "text", "text": "y"}],
            },
            {"role": "assistant", "content": "yo"},
            {"role": "user", "content": "again"},
        ],
        "max_tokens": 7,
        "stop": "\n",
        "user": "ignored-unknown-field",
    }
    async with running(gate) as (_, client):
        r = await client.post("/v1/chat/completions", json=body)
    assert r.json()["choices"][0]["message"]["content"] == "user:hey | assistant:yo | user:again"
    gen = backend.calls[-1]
    assert gen.max_tokens == 7 and list(gen.stop) == ["\n"]


async def test_models_lists_the_configured_names() -> None:
    cfg = Config()
    cfg.server.models = ["auto", "rtgate"]
    async with running(config=cfg) as (_, client):
        r = await client.get("/v1/models")
        assert [m["id"] for m in r.json()["data"]] == ["auto", "rtgate"]
        r2 = await client.post("/v1/chat/completions", json={**chat(), "model": "rtgate"})
        assert r2.status_code == 200


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({**chat(), "model": "gpt-4o"}, 404, "model_not_found"),
        ({**chat(), "n": 2}, 400, "unsupported"),
        (
            {"model": "auto", "messages": [{"role": "tool", "content": "x"}]},
            400,
            "unsupported_role",
        ),
        (
            {
                "model": "auto",
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}],
            },
            400,
            "unsupported_content",
        ),
        (
            {"model": "auto", "messages": [{"role": "system", "content": "x"}]},
            400,
            "invalid_request",
        ),
        ({"model": "auto", "messages": []}, 400, "invalid_request"),
        ({**chat(), "temperature": 3}, 400, "invalid_request"),
        ({**chat(), "max_tokens": 10**6}, 400, "max_tokens_too_large"),
        ({**chat(), "budget_ms": 10**7}, 400, "invalid_budget"),
        (chat("x" * 20_000), 400, "prompt_too_long"),
    ],
)
async def test_bad_requests_get_clear_json_errors(
    body: dict[str, Any], status: int, code: str
) -> None:
    async with running() as (_, client):
        r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == code and err["message"]
    assert "Traceback" not in r.text
