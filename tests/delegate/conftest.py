"""Fixtures for the broker tests: the real Redis and NATS on this machine (``.ci/run``
starts them), a unique prefix per test, and everything a test made removed afterwards."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from rtgate.delegate.jetstream import JetStreamQueue
from rtgate.delegate.redis_streams import RedisStreamsQueue

REDIS_URL = "redis://127.0.0.1:6379/0"
NATS_URL = "nats://127.0.0.1:4222"


@pytest.fixture
def prefix() -> str:
    return f"rtgate-test-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def redis(prefix: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    keys = [k async for k in client.scan_iter(f"{prefix}:*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


@pytest.fixture
async def make_redis(
    prefix: str, redis: aioredis.Redis
) -> AsyncIterator[Callable[..., RedisStreamsQueue]]:
    made: list[RedisStreamsQueue] = []

    def make(**kw: Any) -> RedisStreamsQueue:
        q = RedisStreamsQueue(REDIS_URL, prefix=prefix, **kw)
        made.append(q)
        return q

    yield make
    for q in made:
        await q.aclose()


@pytest.fixture
async def make_nats(prefix: str) -> AsyncIterator[Callable[..., JetStreamQueue]]:
    made: list[JetStreamQueue] = []
    name = prefix.replace("-", "_")

    def make(**kw: Any) -> JetStreamQueue:
        kw.setdefault("memory", True)
        q = JetStreamQueue(NATS_URL, prefix=name, **kw)
        made.append(q)
        return q

    yield make
    cleaner = JetStreamQueue(NATS_URL, prefix=name, memory=True)
    await cleaner.connect()
    for q in made:
        await q.aclose()
    await cleaner.destroy()
    await cleaner.aclose()
