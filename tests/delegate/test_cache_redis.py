"""The Redis cache store on the real Redis: shared by replicas, bounded, expiring."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import numpy as np
import pytest
import redis.asyncio as aioredis

from rtgate.core.errors import InvalidRequest
from rtgate.tiers.cache import ExactCache
from rtgate.tiers.cache_redis import RedisCacheStore
from rtgate.tiers.cache_store import CacheEntry

REDIS_URL = "redis://127.0.0.1:6379/0"
Make = Callable[..., RedisCacheStore]


@pytest.fixture
async def make(prefix: str, redis: aioredis.Redis) -> AsyncIterator[Make]:
    made: list[RedisCacheStore] = []

    def make(**kw: object) -> RedisCacheStore:
        store = RedisCacheStore(REDIS_URL, prefix=prefix, **kw)  # type: ignore[arg-type]
        made.append(store)
        return store

    yield make
    for s in made:
        await s.aclose()


def vec(*xs: float) -> np.ndarray:
    return np.asarray(xs, dtype=np.float32)


def entry(key: str, v: np.ndarray | None = None, text: str = "") -> CacheEntry:
    return CacheEntry(key, key.upper(), {"text": text or f"answer {key}", "data": {}}, v)


async def test_an_entry_put_on_one_replica_is_found_on_another(
    make: Make, redis: aioredis.Redis
) -> None:
    a = make()
    b = make()
    await a.put(entry("能退吗", vec(1, 0, 0), "可以退"))
    await a.put(entry("limit", vec(0, 1, 0)))
    got = await b.get("能退吗")
    assert got is not None and got.payload["text"] == "可以退" and got.query == "能退吗".upper()
    assert got.vector is not None and got.vector.tolist() == [1.0, 0.0, 0.0]
    near = await b.nearest(vec(0.9, 0.1, 0), k=2)  # not normalised: cosine anyway
    assert [e.key for _, e in near] == ["能退吗", "limit"]
    assert near[0][0] == pytest.approx(0.9 / np.hypot(0.9, 0.1), rel=1e-5)
    assert await b.get("missing") is None
    assert 0 < await redis.pttl(f"{a.entry_prefix}{_sha('limit')}") <= 3_600_000


def _sha(key: str) -> str:
    import hashlib

    return hashlib.sha1(key.encode()).hexdigest()


async def test_full_store_evicts_the_least_recently_used(make: Make, redis: aioredis.Redis) -> None:
    a = make(max_entries=3)
    b = make(max_entries=3)
    for i, key in enumerate("wxy"):
        await a.put(entry(key, vec(1, i, 0)))
    assert await b.nearest(vec(1, 0, 0), k=3)  # b holds w, x, y
    assert await a.get("w") is not None  # w is used: x is now the oldest
    await a.put(entry("z", vec(1, 3, 0)))
    assert await redis.zcard(a.idx) == 3
    assert await b.get("x") is None
    keys = {e.key for _, e in await b.nearest(vec(1, 1, 0), k=4)}
    assert keys == {"w", "y", "z"}  # b's local index followed the eviction


async def test_an_expired_entry_is_not_returned_and_is_forgotten(
    make: Make, redis: aioredis.Redis
) -> None:
    a = make()
    await a.put(entry("old", vec(1, 0)))
    await a.put(entry("new", vec(0.8, 0.6)))
    assert len(await a.nearest(vec(1, 0), k=2)) == 2
    await redis.delete(f"{a.entry_prefix}{_sha('old')}")  # what its TTL does
    near = await a.nearest(vec(1, 0), k=2)
    assert [e.key for _, e in near] == ["new"]
    assert await redis.hlen(a.vec) == 1 and await redis.zcard(a.idx) == 1


async def test_a_replica_that_fell_behind_the_log_reloads(
    make: Make, redis: aioredis.Redis
) -> None:
    a = make()
    b = make()
    await a.put(entry("one", vec(1, 0)))
    await b.sync()
    await a.put(entry("two", vec(0, 1)))
    await a.put(entry("three", vec(0.6, 0.8)))
    await redis.xtrim(a.log, maxlen=1, approximate=False)  # the log forgot "two"
    resyncs = b.resyncs
    keys = {e.key for _, e in await b.nearest(vec(0, 1), k=3)}
    assert keys == {"one", "two", "three"} and b.resyncs == resyncs + 1


async def test_bad_vectors_are_refused(make: Make, redis: aioredis.Redis) -> None:
    a = make()
    with pytest.raises(InvalidRequest):
        await a.put(entry("nan", vec(float("nan"), 1)))
    await a.put(entry("ok", vec(1, 0)))
    await a.nearest(vec(1, 0))
    with pytest.raises(InvalidRequest):
        await a.put(entry("3d", vec(1, 0, 0)))


async def test_the_exact_cache_runs_on_the_redis_store(make: Make, redis: aioredis.Redis) -> None:
    one = ExactCache(make())
    other = ExactCache(make())
    await one.put("What is my LIMIT?", "Your limit is 5000.", {"intent": "limit"})
    hit = await other.get("what is my limit")
    assert hit is not None and hit.payload == {
        "text": "Your limit is 5000.",
        "data": {"intent": "limit"},
    }


def test_a_decoding_client_is_refused(redis: aioredis.Redis) -> None:
    with pytest.raises(ValueError, match="decode_responses"):
        RedisCacheStore(redis)
