"""POST /v1/gate (JSON and SSE) and GET /v1/jobs/{id}, on fake tiers and virtual time."""

from __future__ import annotations

import json

import pytest

from rtgate.config.loader import Config
from tests.server.server_helpers import fake_gate, parse_sse, running

pytestmark = pytest.mark.looptime


async def test_answer_route_trace_and_delegated_job() -> None:
    async with running() as (_, client):
        r = await client.post("/v1/gate", json={"input": "hi", "budget_ms": 150})
        assert r.status_code == 200
        body = r.json()
        assert body["answer"] == "quick one"
        assert body["route"] == "local"
        assert body["placeholder"] is False
        first = body["trace"]["attempts"][0]
        assert (first["tier"], first["outcome"], first["predicted_ms"]) == (
            "cloud",
            "skipped",
            1800.0,
        )
        job_id = body["job_id"]
        assert job_id and r.headers["x-rtgate-job-id"] == job_id
        assert r.headers["x-rtgate-route"] == "local"

        r = await client.get(f"/v1/jobs/{job_id}", params={"wait_ms": 5000})
        job = r.json()
        assert r.status_code == 200
        assert (job["id"], job["tier"], job["status"], job["text"]) == (
            job_id,
            "cloud",
            "done",
            "deep answer",
        )


async def test_job_without_wait_reports_its_current_status() -> None:
    async with running() as (_, client):
        job_id = (await client.post("/v1/gate", json={"input": "x", "budget_ms": 150})).json()[
            "job_id"
        ]
        r = await client.get(f"/v1/jobs/{job_id}")
        assert r.json()["status"] in ("queued", "running")


async def test_delegate_false_and_budget_header() -> None:
    async with running() as (_, client):
        r = await client.post(
            "/v1/gate", json={"input": "hi", "delegate": False}, headers={"X-Budget-Ms": "20"}
        )
        body = r.json()
        # 20 ms fits only the template tier; no job because the request said so
        assert body["route"] == "template"
        assert body["job_id"] is None and "x-rtgate-job-id" not in r.headers
        assert body["trace"]["budget_ms"] == 20.0


async def test_tighter_of_header_and_field_wins() -> None:
    async with running() as (_, client):
        r = await client.post(
            "/v1/gate", json={"input": "hi", "budget_ms": 20}, headers={"X-Budget-Ms": "5000"}
        )
        assert r.json()["trace"]["budget_ms"] == 20.0


async def test_silent_answer_uses_the_placeholder_in_the_input_language() -> None:
    cfg = Config()
    async with running(config=cfg) as (_, client):
        r = await client.post("/v1/gate", json={"input": "我想把", "budget_ms": 1})
        body = r.json()
        assert body["route"] == "silent" and body["placeholder"] is True
        assert body["answer"] == cfg.gate.placeholder_zh
        r = await client.post("/v1/gate", json={"input": "hello", "budget_ms": 1})
        assert r.json()["answer"] == cfg.gate.placeholder


async def test_sse_framing_tokens_done_then_followup() -> None:
    async with running() as (_, client):
        r = await client.post("/v1/gate", json={"input": "hi", "budget_ms": 150, "stream": True})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/event-stream")
    assert r.headers["cache-control"] == "no-cache"
    assert r.headers["x-accel-buffering"] == "no"
    assert r.text.endswith("\n\n")
    events = [(e, d) for e, d in parse_sse(r.text) if e != ":"]
    names = [e for e, _ in events]
    assert names == ["token", "token", "done", "followup"]
    tokens = [json.loads(d) for e, d in events if e == "token"]
    assert [t["text"] for t in tokens] == ["quick", " one"]
    assert tokens[0]["t_ms"] <= tokens[1]["t_ms"]
    done = json.loads(events[2][1])
    followup = json.loads(events[3][1])
    assert done["answer"] == "quick one" and done["route"] == "local"
    assert followup["id"] == done["job_id"]
    assert followup["status"] == "done" and followup["text"] == "deep answer"


async def test_sse_pings_while_the_followup_runs() -> None:
    cfg = Config()
    cfg.server.sse_ping_s = 0.1  # the cloud tier takes 600 ms (virtual)
    async with running(config=cfg) as (_, client):
        r = await client.post("/v1/gate", json={"input": "hi", "budget_ms": 150, "stream": True})
    events = parse_sse(r.text)
    names = [e for e, _ in events]
    pings = [i for i, e in enumerate(names) if e == ":"]
    assert len(pings) >= 3
    assert names.index("done") < pings[0] < names.index("followup")


async def test_accept_header_selects_sse_and_follow_false_ends_after_done() -> None:
    async with running() as (_, client):
        r = await client.post(
            "/v1/gate",
            json={"input": "hi", "budget_ms": 150, "follow": False},
            headers={"Accept": "text/event-stream"},
        )
    names = [e for e, _ in parse_sse(r.text)]
    assert names == ["token", "token", "done"]


async def test_sse_template_piece_carries_its_data() -> None:
    from rtgate.core.request import Piece
    from rtgate.tiers.fake import FakeTier

    tpl = FakeTier("template", 10, [Piece("我想把积分兑换成话费", {"intent": "points_exchange"})])
    gate = fake_gate([tpl], template=1.0)
    async with running(gate) as (_, client):
        r = await client.post("/v1/gate", json={"input": "我想把", "stream": True})
    token = json.loads(parse_sse(r.text)[0][1])
    assert token["data"] == {"intent": "points_exchange"}


async def test_unknown_job_is_a_json_404() -> None:
    async with running() as (_, client):
        r = await client.get("/v1/jobs/job-nope")
    assert r.status_code == 404
    assert r.json() == {
        "error": {
            "code": "job_not_found",
            "message": "no job 'job-nope'",
            "type": "not_found_error",
        }
    }


async def test_conversation_messages_reach_the_tiers() -> None:
    from rtgate.backends.fake import FakeBackend
    from rtgate.tiers.llm import LLMTier

    backend = FakeBackend(lambda gen: [f"{len(gen.messages)} messages"])
    tier = LLMTier(backend, "local", 50, few_shot={}, style="chat")
    gate = fake_gate([tier], local=5.0)
    async with running(gate) as (_, client):
        body = {
            "input": "and now?",
            "messages": [
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "hi"},
                {"role": "user", "content": "and now?"},
            ],
        }
        r = await client.post("/v1/gate", json=body)
    assert r.json()["answer"] == "3 messages"
