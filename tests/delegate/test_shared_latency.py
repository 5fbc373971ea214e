"""Learned latency shared through the real Redis: a new replica starts warm."""

from __future__ import annotations

import random

import redis.asyncio as aioredis

from rtgate.core.latency import LatencyModel, WindowedQuantiles
from rtgate.delegate.warm import SharedLatency, replay, summarise
from rtgate.gate import Gate
from rtgate.tiers.fake import FakeTier


def observed(n: int = 400, seed: int = 1) -> LatencyModel:
    rng = random.Random(seed)
    m = LatencyModel()
    for _ in range(n):
        ttft = rng.lognormvariate(6.4, 0.45)  # ~600 ms median, a long tail
        m.observe(ttft, ttft + rng.uniform(100, 300))
    return m


def close(a: float, b: float, rel: float = 0.03) -> bool:
    return abs(a - b) <= rel * max(a, b)


def test_replaying_a_summary_keeps_the_quantiles() -> None:
    src = observed()
    dst = WindowedQuantiles(512)
    assert replay(dst, summarise(src.ttft)) == src.ttft.count
    for q in ("p50", "p90", "p99"):
        assert close(getattr(dst, q), getattr(src.ttft, q)), q


async def test_a_new_replica_starts_warm(prefix: str, redis: aioredis.Redis) -> None:
    old = Gate([FakeTier("cloud", 3, delegable=True), FakeTier("template", 1)])
    old.models["cloud"] = observed()
    share = SharedLatency(redis, prefix=prefix, replica="old")
    assert await share.save(old.models) == 1  # the template tier has no samples: not saved

    new = Gate([FakeTier("cloud", 3, delegable=True), FakeTier("template", 1)])
    assert new.models["cloud"].cold
    loaded = await SharedLatency(redis, prefix=prefix).load(new.models)
    assert loaded == {"cloud": 400}
    assert not new.models["cloud"].cold and new.models["template"].cold
    for scope in ("first_token", "complete"):
        assert close(new.predict(new.tiers[0], scope), old.predict(old.tiers[0], scope))
    assert new.choose(150.0) is None  # warm: cloud is known to be too slow for 150 ms


async def test_a_replica_with_its_own_samples_keeps_them(
    prefix: str, redis: aioredis.Redis
) -> None:
    share = SharedLatency(redis, prefix=prefix)
    await share.save({"cloud": observed()})
    mine = LatencyModel()
    mine.observe(5.0, 6.0)
    assert await share.load({"cloud": mine}) == {}
    assert mine.ttft.count == 1 and mine.predict_ttft() < 10.0
