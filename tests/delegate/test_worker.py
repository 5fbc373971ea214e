"""``rtgate worker``: a worker process's loop, on the real Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis
from typer.testing import CliRunner

from rtgate.bench.replica import PROFILE_ENV
from rtgate.cli.worker import app, load_tiers, run_worker
from rtgate.core.errors import ConfigError
from rtgate.core.latency import LatencyModel
from rtgate.core.request import Request
from rtgate.delegate.factory import DelegationSettings
from rtgate.delegate.redis_streams import RedisStreamsQueue
from rtgate.delegate.warm import SharedLatency
from rtgate.gate.jobs import Job, new_job_id


async def idle_runner(job: Job) -> None:
    raise AssertionError("a gate-side queue runs no jobs")


async def test_worker_answers_then_stops_and_shares_its_latency(
    prefix: str,
    redis: aioredis.Redis,
    make_redis: Callable[..., RedisStreamsQueue],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(PROFILE_ENV, "fast-cloud")  # an emulated model, ~20 ms
    tiers = load_tiers("rtgate.bench.replica:bench_tiers", None)
    assert [t.name for t in tiers] == ["cloud"] and tiers[0].delegable
    stop = asyncio.Event()
    settings = DelegationSettings(backend="redis", prefix=prefix, concurrency=2)
    worker = asyncio.create_task(run_worker(settings, tiers, stop=stop, grace_s=1.0))
    replica = make_redis()
    await replica.start(idle_runner)
    jobs = [Job(new_job_id(), "cloud", Request(input=f"q{i}"), 5_000.0) for i in range(3)]
    for j in jobs:
        replica.submit(j)
    async with asyncio.timeout(10):
        done = [await replica.store.wait(j.id) for j in jobs]
    assert [d.text for d in done] == ["answer to q0", "answer to q1", "answer to q2"]
    stop.set()
    queue = await worker
    assert queue.stats["processed"] == 3
    model = LatencyModel()
    assert await SharedLatency(redis, prefix=prefix).load({"cloud": model}) == {"cloud": 3}
    assert not model.cold


def test_bad_tier_factories_are_config_errors() -> None:
    for spec in ("no_colon", "rtgate.cli.worker:"):
        with pytest.raises(ConfigError):
            load_tiers(spec, None)
    result = CliRunner().invoke(app, ["worker", "--tiers", "nothing"])
    assert result.exit_code == 2 and "module:function" in result.output
