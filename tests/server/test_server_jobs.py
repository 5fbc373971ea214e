"""Delegated jobs and their clients: a client that leaves before it can collect its job
cancels it (``Gate.cancel_job`` in process); one that has the id keeps it running."""

from __future__ import annotations

import json
from typing import Any

import pytest
from starlette.testclient import TestClient

from rtgate.gate import Gate
from rtgate.server import create_app
from rtgate.tiers.fake import FakeTier
from tests.server.server_helpers import (
    AsgiCall,
    SignalTier,
    fake_gate,
    parse_sse,
    running,
    server_only_config,
)


def hanging_cloud_gate() -> tuple[Gate, SignalTier]:
    """The cloud tier never fits the budget and, delegated, hangs until cancelled."""
    cloud = SignalTier("cloud", 80, ["deep"], delegable=True, hang_on="hi")
    gate = fake_gate([cloud, FakeTier("template", 10, ["canned"])], cloud=1800.0, template=1.0)
    return gate, cloud


def done_event(body: bytes) -> dict[str, Any]:
    events = dict((e, d) for e, d in parse_sse(body.decode()) if e not in (":", None))
    return dict(json.loads(events["done"]))


@pytest.mark.looptime
async def test_leaving_an_sse_follow_up_cancels_the_job() -> None:
    gate, cloud = hanging_cloud_gate()
    app = create_app(server_only_config(), gate=gate, warmup=False)
    async with app.router.lifespan_context(app):
        call = AsgiCall(app, "/v1/gate", {"input": "hi", "budget_ms": 100, "stream": True})
        task = call.start()
        await cloud.started.wait()  # the delegated job runs; the stream waits for it
        call.disconnect()
        await task
        job_id = done_event(call.body)["job_id"]
        job = await gate.wait_job(job_id)
        assert (job.status, job.error) == ("cancelled", "cancelled by the caller")
        assert cloud.cancelled == 1  # the cloud tier's stream was closed


@pytest.mark.looptime
async def test_a_client_holding_the_id_keeps_the_job() -> None:
    gate = fake_gate()  # the cloud tier answers after 600 ms (virtual)
    async with running(gate) as (_, client):
        r = await client.post("/v1/gate", json={"input": "hi", "budget_ms": 150})
        job_id = r.json()["job_id"]
        assert r.headers["x-rtgate-job-id"] == job_id
        done = await client.get(f"/v1/jobs/{job_id}", params={"wait_ms": 5000})
        streamed = await client.post(
            "/v1/gate", json={"input": "hi", "budget_ms": 150, "stream": True, "follow": False}
        )
        second = done_event(streamed.content)["job_id"]
        later = await client.get(f"/v1/jobs/{second}", params={"wait_ms": 5000})
    assert done.json()["status"] == "done" and done.json()["text"] == "deep answer"
    assert later.json()["status"] == "done"  # follow: false, the client left: still runs


def test_closing_the_socket_cancels_the_watched_follow_up() -> None:
    gate, cloud = hanging_cloud_gate()
    app = create_app(server_only_config(), gate=gate, warmup=False)
    with TestClient(app) as client:
        with client.websocket_connect("/v1/ws") as ws:
            ws.send_json({"seq": 1, "input": "hi", "budget_ms": 100, "stream": False})
            answer = ws.receive_json()
            assert answer["followup"] is True
            assert cloud.started_t.wait(10)
        assert client.portal is not None
        job = client.portal.call(gate.wait_job, answer["job_id"])
    assert job.status == "cancelled" and cloud.cancelled == 1


def test_a_cancel_message_cancels_the_follow_ups() -> None:
    gate, cloud = hanging_cloud_gate()
    app = create_app(server_only_config(), gate=gate, warmup=False)
    with TestClient(app) as client, client.websocket_connect("/v1/ws") as ws:
        ws.send_json({"seq": 1, "input": "hi", "budget_ms": 100, "stream": False})
        answer = ws.receive_json()
        assert cloud.started_t.wait(10)
        ws.send_json({"type": "cancel", "seq": 2})
        cancelled = ws.receive_json()
        assert client.portal is not None
        job = client.portal.call(gate.wait_job, answer["job_id"])
        polled = client.get(f"/v1/jobs/{answer['job_id']}").json()
    assert cancelled == {"type": "cancelled", "seq": 1, "job_id": answer["job_id"]}
    assert job.status == "cancelled" and polled["status"] == "cancelled"
