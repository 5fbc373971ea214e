"""GET /healthz, GET /metrics and the OpenAPI schema."""

from __future__ import annotations

import pytest

from rtgate.tiers.emulated import CLOUD_70B, EmulatedLatency
from rtgate.tiers.fake import FakeTier
from tests.server.server_helpers import fake_gate, running

pytestmark = pytest.mark.looptime


async def test_healthz_says_the_cloud_tier_is_emulated() -> None:
    cloud = EmulatedLatency(FakeTier("inner", 80), CLOUD_70B, name="cloud", delegable=True)
    gate = fake_gate([cloud, FakeTier("template", 10)], template=1.0)
    async with running(gate) as (_, client):
        r = await client.get("/healthz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ok"
    assert body["cloud"]["mode"] == "emulated" and body["cloud"]["emulated"] is True
    assert "cloud-70b" in body["cloud"]["label"]
    tiers = {t["name"]: t for t in body["tiers"]}
    assert tiers["cloud"]["kind"] == "emulated"
    assert tiers["cloud"]["ttft_p99_ms"] == CLOUD_70B.ttft.p99  # the profile's prior
    assert tiers["template"]["samples"] == 0
    assert body["warm"] is False and body["queue_depth"] == 0


async def test_healthz_after_warm_up_reports_each_tier() -> None:
    import httpx

    from rtgate.config.loader import Config
    from rtgate.server import create_app

    app = create_app(Config(), gate=fake_gate(), warmup=True)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            body = (await client.get("/healthz")).json()
    assert body["warm"] is True
    assert {t["name"]: t["warm"] for t in body["tiers"]} == {
        "cloud": "ok",
        "local": "ok",
        "template": "ok",
    }
    assert all(t["samples"] == 1 for t in body["tiers"])
    assert body["warmup_ms"] is not None


async def test_healthz_reports_resilience_auth_and_delegation() -> None:
    from rtgate.resilience import BreakerConfig
    from rtgate.resilience.wire import TierPolicy, with_policy
    from tests.server.server_helpers import chain

    policies = {
        "local": TierPolicy(capacity=1, group="llama"),
        "cloud": TierPolicy(capacity=4, breaker=BreakerConfig(), retries=2),
    }
    gate = fake_gate([with_policy(t, policies.get(t.name, TierPolicy())) for t in chain()])
    async with running(gate) as (_, client):
        await client.post("/v1/gate", json={"input": "hi", "budget_ms": 150, "delegate": False})
        body = (await client.get("/healthz")).json()
    res = body["resilience"]
    assert res["local"]["AdmissionTier"]["admitted"] == 1
    assert res["local"]["AdmissionTier"]["capacity"] == 1
    assert res["cloud"]["BreakerTier"]["state"] == "closed"
    assert set(res["cloud"]) == {"AdmissionTier", "RetryTier", "BreakerTier"}
    assert "template" not in res
    assert body["auth"] == "open"
    assert body["delegation"] == {"backend": "inprocess", "shared_latency": {"enabled": False}}


async def test_metrics_are_the_gates_prometheus_registry() -> None:
    async with running() as (_, client):
        await client.post("/v1/gate", json={"input": "hi", "budget_ms": 20, "delegate": False})
        r = await client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    assert 'rtgate_requests_total{route="template"} 1.0' in r.text
    assert "rtgate_ttft_seconds_bucket" in r.text
    assert 'rtgate_tier_attempts_total{outcome="skipped",tier="cloud"} 1.0' in r.text


async def test_openapi_schema_documents_every_endpoint() -> None:
    async with running() as (_, client):
        schema = (await client.get("/openapi.json")).json()
    paths = schema["paths"]
    for path in ("/v1/gate", "/v1/chat/completions", "/v1/jobs/{job_id}", "/v1/models"):
        assert path in paths
    assert {"/healthz", "/metrics"} <= set(paths)
    gate_op = paths["/v1/gate"]["post"]
    assert "X-Budget-Ms" in [p["name"] for p in gate_op["parameters"]]
    assert "text/event-stream" in gate_op["responses"]["200"]["content"]
    assert "GateBody" in schema["components"]["schemas"]


async def test_healthz_answers_head_too() -> None:
    async with running() as (_, client):
        r = await client.head("/healthz")
    assert r.status_code == 200 and r.content == b""


async def test_overload_refusals_are_counted_in_metrics_and_healthz(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from rtgate.server import app as app_module
    from rtgate.server.arrival import LoopWatch

    watch = LoopWatch()
    watch.count("protocol_behind")
    watch.count("protocol_behind")
    watch.count("door_full")
    monkeypatch.setattr(app_module, "WATCH", watch)
    async with running() as (_, client):
        metrics = (await client.get("/metrics")).text
        health = (await client.get("/healthz")).json()
    families = {f.name: f for f in text_string_to_metric_families(metrics)}
    samples = {
        (s.labels["where"], s.labels["why"]): s.value
        for s in families["rtgate_overload_refusals"].samples
    }
    assert samples == {("protocol", "behind"): 2.0, ("door", "full"): 1.0}
    assert "rtgate_requests" in families  # the gate's own families are still there
    assert health["overload"] == {
        "loop_behind_ms": 0.0,
        "refused": {"protocol_behind": 2, "door_full": 1},
    }
