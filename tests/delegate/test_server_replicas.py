"""Gate replicas (``create_app`` instances) on one Redis prefix, with an in-test worker:
any replica answers for a job, the id is sent once the job is on Redis, a client that
leaves cancels its job on the broker, the fleet's latencies are shared, and the answer
cache lives in Redis."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import redis.asyncio as aioredis
from fastapi import FastAPI

from rtgate.config.loader import Config, load_config
from rtgate.core.latency import LatencyModel, Prior
from rtgate.core.request import Request
from rtgate.delegate.factory import DelegationSettings, make_queue
from rtgate.delegate.redis_streams import RedisStreamsQueue
from rtgate.delegate.warm import SharedLatency
from rtgate.gate import Gate, GateConfig
from rtgate.gate.job_runner import TierRunner
from rtgate.gate.jobs import Job, JobStore, new_job_id
from rtgate.server import create_app
from rtgate.server.fleet import shared_latency
from rtgate.server.state import ServerState
from rtgate.tiers.fake import FakeTier

REDIS_URL = "redis://127.0.0.1:6379/0"


def replica(prefix: str, **delegation: Any) -> tuple[FastAPI, Gate]:
    """One gate replica: a template that answers at once, a cloud tier too slow to fit."""
    cfg = Config()
    cfg.delegation = DelegationSettings(backend="redis", prefix=prefix, poll_s=0.05, **delegation)
    store = JobStore()
    tiers = [FakeTier("template", 1, ["ok"]), FakeTier("cloud", 3, hang=True, delegable=True)]
    gate = Gate(
        tiers,
        config=GateConfig(probe_interval_ms=0),
        queue=make_queue(cfg.delegation, store),
        store=store,
        priors={"cloud": Prior(1800.0, 3000.0), "template": Prior(1.0, 1.0)},
    )
    return create_app(cfg, gate=gate, warmup=False), gate


@asynccontextmanager
async def serving(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rtgate") as client:
            yield client


@asynccontextmanager
async def worker(prefix: str) -> AsyncIterator[RedisStreamsQueue]:
    """An in-test worker: the cloud tier, on the same Redis prefix."""
    q = RedisStreamsQueue(REDIS_URL, prefix=prefix, consume=True)
    await q.start(TierRunner([FakeTier("cloud", 3, ["deep ", "answer"], delegable=True)]))
    try:
        yield q
    finally:
        await q.aclose()


async def test_a_job_delegated_through_one_replica_is_read_on_another(
    prefix: str, redis: aioredis.Redis
) -> None:
    app_a, _ = replica(prefix)
    app_b, _ = replica(prefix)
    async with serving(app_a) as a, serving(app_b) as b, asyncio.timeout(10):
        r = await a.post("/v1/gate", json={"input": "limit?", "budget_ms": 150})
        body = r.json()
        assert body["route"] == "template" and body["job_id"] is not None
        job_id = body["job_id"]
        # the id came back only once the job was on Redis: B finds it before any worker ran
        queued = await b.get(f"/v1/jobs/{job_id}")
        assert queued.status_code == 200 and queued.json()["status"] == "queued"
        async with worker(prefix) as w:
            done = await b.get(f"/v1/jobs/{job_id}", params={"wait_ms": 5000})
            again = await a.get(f"/v1/jobs/{job_id}", params={"wait_ms": 5000})
        missing = await b.get("/v1/jobs/job-unknown")
    assert done.status_code == 200
    assert (done.json()["status"], done.json()["text"]) == ("done", "deep answer")
    assert again.json()["text"] == "deep answer" and w.stats["processed"] == 1
    assert missing.status_code == 404


class Watched:
    """An ASGI client for one streamed request that can leave once ``done`` has arrived."""

    def __init__(self, app: FastAPI, body: dict[str, Any]) -> None:
        raw = json.dumps(body).encode()
        self.app, self.raw, self.first = app, raw, True
        self.done = asyncio.Event()
        self.gone = asyncio.Event()
        self.body = b""
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/gate",
            "raw_path": b"/v1/gate",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"host", b"rtgate")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 8000),
        }

    async def receive(self) -> dict[str, Any]:
        if self.first:
            self.first = False
            return {"type": "http.request", "body": self.raw, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.body += message.get("body", b"")
        if b"event: done" in self.body:
            self.done.set()

    def job_id(self) -> str:
        for block in self.body.decode().split("\n\n"):
            if block.startswith("event: done"):
                return str(json.loads(block.split("data: ", 1)[1])["job_id"])
        raise AssertionError("no done event")


async def test_leaving_the_follow_up_cancels_the_job_on_the_broker(
    prefix: str, redis: aioredis.Redis
) -> None:
    app, gate = replica(prefix)
    async with app.router.lifespan_context(app), asyncio.timeout(10):
        call = Watched(app, {"input": "limit?", "budget_ms": 150, "stream": True})
        task = asyncio.create_task(app(call.scope, call.receive, call.send))
        await call.done.wait()
        call.gone.set()  # the client leaves while the stream waits for the follow-up
        await task
        st: ServerState = app.state.rtgate
        await asyncio.gather(*st.background)  # the broker-side cancel
        job_id = call.job_id()
        assert gate.queue.depth == 1  # still on the stream: no worker took it
        (record,) = await gate.queue.records([job_id])  # type: ignore[attr-defined]
    assert record is not None and record["status"] == "cancelled"
    assert gate.jobs.get(job_id).status == "cancelled"


async def test_a_job_the_broker_refuses_sends_no_id(prefix: str, redis: aioredis.Redis) -> None:
    other = RedisStreamsQueue(REDIS_URL, prefix=prefix, maxsize=1)
    store = JobStore()
    other.store = store
    await other.connect()
    try:
        await other.start(TierRunner([]))
        held = Job(new_job_id(), "cloud", Request(input="first"), 5000.0)
        other.submit(held)
        assert await other.enqueued(held.id)  # the broker now holds 1 of 1
        app, _ = replica(prefix, queue_size=1)
        async with serving(app) as client:
            # a budget that leaves the broker time to answer on a starved machine: with 150 ms a
            # run at load 7 had 22 ms left, and the wait timed out before the refusal came
            r = await client.post("/v1/gate", json={"input": "limit?", "budget_ms": 3000})
    finally:
        await other.aclose()
    body = r.json()
    assert r.status_code == 200 and body["route"] == "template"
    assert body["job_id"] is None and "x-rtgate-job-id" not in r.headers
    assert "delegation refused" in body["trace"]["degraded"]


async def test_a_replica_starts_with_the_fleets_latency_and_publishes_its_own(
    prefix: str, redis: aioredis.Redis
) -> None:
    fleet = LatencyModel()
    for i in range(50):
        fleet.observe(700.0 + i, 900.0 + i)
    await SharedLatency(redis, prefix=prefix).save({"cloud": fleet})
    app, gate = replica(prefix)
    async with serving(app) as client, asyncio.timeout(10):
        health = (await client.get("/healthz")).json()
        assert gate.models["cloud"].ttft.count == 50  # replayed before the first request
        ok = await client.post("/v1/gate", json={"input": "x", "budget_ms": 150})
        assert ok.json()["route"] == "template"
    assert health["delegation"] == {
        "backend": "redis",
        "shared_latency": {"enabled": True, "loaded": {"cloud": 50}},
    }
    published = await redis.hget(f"{prefix}:latency", "template")  # the last save, at stop
    assert published is not None and json.loads(published)["ttft"]["n"] >= 1


async def test_redis_down_costs_a_warning_not_the_start_up() -> None:
    cfg = load_config(
        env={"RTGATE_DELEGATION_BACKEND": "redis", "RTGATE_DELEGATION_URL": "redis://127.0.0.1:1/0"}
    )
    gate = Gate([FakeTier("template", 1)])
    async with asyncio.timeout(10), shared_latency(cfg, gate) as status:
        assert status["enabled"] is True and status["loaded"] == {}
        assert "Error" in status["error"]


async def test_the_answer_cache_is_shared_through_redis(prefix: str) -> None:
    from rtgate.kinds import BuildContext
    from rtgate.kinds.cache import KIND
    from rtgate.tiers.cache import CacheTier
    from rtgate.tiers.cache_redis import RedisCacheStore

    env = {
        "RTGATE_CACHE_ENABLED": "1",
        "RTGATE_CACHE_STORE": "redis",
        "RTGATE_CACHE_PREFIX": prefix,
    }
    cfg = load_config(env=env)
    a, b = (BuildContext("cache", cfg.delegation) for _ in range(2))
    built_a, built_b = KIND.build(cfg.cache, a), KIND.build(cfg.cache, b)  # two replicas
    tier_a, tier_b = built_a.tier, built_b.tier
    assert isinstance(tier_a, CacheTier) and isinstance(tier_b, CacheTier)
    try:
        assert [type(c.__self__) for c in a.closers] == [RedisCacheStore]  # type: ignore[attr-defined]
        assert "shared in Redis" in built_a.info.label
        await tier_a.put("What is my limit?", "Your limit is 5000.", {"source": "cloud"})
        hit = await tier_b.lookup("what is my LIMIT")
        assert hit is not None and hit.text == "Your limit is 5000."
    finally:
        for close in [*a.closers, *b.closers]:
            await close()
        cleaner = aioredis.Redis.from_url(REDIS_URL)
        keys = [k async for k in cleaner.scan_iter(f"{prefix}:*")]
        if keys:
            await cleaner.delete(*keys)
        await cleaner.aclose()


async def test_a_jobs_owner_is_checked_on_every_replica(prefix: str, tmp_path: Path) -> None:
    from rtgate.security import KeyPolicy, KeyStore
    from rtgate.security.keys import PEPPER_ENV
    from rtgate.server.middleware_stack import server_middleware

    store = KeyStore("pepper-for-the-replica-tests-0123")
    key_a, _ = store.create("a", KeyPolicy())
    key_b, _ = store.create("b", KeyPolicy())
    store.save(tmp_path / "keys.json")
    env = {"RTGATE_SECURITY_API_KEYS_FILE": str(tmp_path / "keys.json")}
    env[PEPPER_ENV] = "pepper-for-the-replica-tests-0123"
    apps = []
    for _ in range(2):
        _, gate = replica(prefix)
        cfg = load_config(env=env)
        cfg.delegation = DelegationSettings(backend="redis", prefix=prefix, poll_s=0.05)
        cfg.server.discover_routers = False
        apps.append(create_app(cfg, gate=gate, warmup=False, middleware=server_middleware(cfg)))
    as_a = {"Authorization": f"Bearer {key_a}"}
    as_b = {"Authorization": f"Bearer {key_b}"}
    async with serving(apps[0]) as one, serving(apps[1]) as two, asyncio.timeout(10):
        r = await one.post("/v1/gate", json={"input": "limit?", "budget_ms": 150}, headers=as_a)
        job_id = r.json()["job_id"]
        assert job_id is not None
        on_other_replica = await two.get(f"/v1/jobs/{job_id}", headers=as_a)
        other_key = await two.get(f"/v1/jobs/{job_id}", headers=as_b)
        cancel_other = await two.delete(f"/v1/jobs/{job_id}", headers=as_b)
    assert on_other_replica.status_code == 200
    assert other_key.status_code == 404 and cancel_other.status_code == 404
