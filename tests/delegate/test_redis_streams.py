"""Delegation on the real Redis: results, the bound, dead workers, duplicates, lookups."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from rtgate.core.errors import JobNotFound, QueueFull
from rtgate.core.latency import Prior
from rtgate.core.request import Request
from rtgate.delegate.broker import REFUSED
from rtgate.delegate.redis_streams import GROUP, RedisStreamsQueue
from rtgate.gate import Gate, GateConfig
from rtgate.gate.job_runner import TierRunner
from rtgate.gate.jobs import Job, JobStore, find_job, new_job_id, wait_job
from rtgate.tiers.fake import FakeTier
from tests.delegate.delegate_helpers import cloud_tier, eventually, idle_runner, job

Make = Callable[..., RedisStreamsQueue]


async def test_gate_delegates_through_redis_and_a_worker_answers(make_redis: Make) -> None:
    store = JobStore()
    queue = make_redis(store=store)
    tiers = [FakeTier("template", 1, ["ok"]), FakeTier("cloud", 3, hang=True, delegable=True)]
    gate = Gate(
        tiers,
        config=GateConfig(probe_interval_ms=0),
        queue=queue,
        store=store,
        priors={"cloud": Prior(1800.0, 3000.0), "template": Prior(1.0, 1.0)},
    )
    worker = make_redis(consume=True)
    await worker.start(TierRunner([cloud_tier()]))
    async with gate, asyncio.timeout(5):
        result = await gate.answer(Request(input="limit?"), budget_ms=150)
        assert result.route == "template" and result.job_id is not None
        assert await queue.enqueued(result.job_id)
        done = await gate.wait_job(result.job_id)
    assert (done.status, done.text) == ("done", "deep answer")
    assert queue.stats["delivered"] == 1 and worker.stats["processed"] == 1


async def test_any_replica_looks_up_and_follows_a_job(make_redis: Make) -> None:
    first = make_redis()
    await first.start(idle_runner)
    j = job()
    first.submit(j)
    assert await first.enqueued(j.id)
    await first.aclose()  # the replica that took the request goes away
    other = make_redis(poll_s=0.02)  # not the job's reply address: it polls the record
    await other.start(idle_runner)
    queued = await find_job(other, other.store, j.id)  # GET /v1/jobs/{id} on any replica
    assert queued.status == "queued"
    worker = make_redis(consume=True)
    await worker.start(TierRunner([cloud_tier()]))
    async with asyncio.timeout(5):
        followed = await wait_job(other, other.store, j.id)  # the caller reconnected here
    assert (followed.status, followed.text) == ("done", "deep answer")
    assert await other.lookup("job-unknown") is None
    with pytest.raises(JobNotFound):
        await find_job(other, other.store, "job-unknown")
    with pytest.raises(JobNotFound):
        await other.follow("job-unknown")


async def test_full_queue_refuses_and_keeps_queued_jobs(
    make_redis: Make, redis: aioredis.Redis
) -> None:
    q = make_redis(maxsize=2)
    await q.start(idle_runner)
    a, b = job("a"), job("b")
    q.submit(a)
    q.submit(b)
    assert await q.enqueued(a.id) and await q.enqueued(b.id)
    with pytest.raises(QueueFull):
        q.submit(job("c"))  # refused at once: the broker said it holds 2 of 2
    other = make_redis(maxsize=2)  # knows nothing yet: the broker refuses atomically
    await other.start(idle_runner)
    c = job("c")
    other.submit(c)
    assert not await other.enqueued(c.id)
    assert c.status == "failed" and (c.error or "").startswith(REFUSED)
    assert await redis.xlen(q.stream) == 2  # nothing trimmed
    assert [x.status for x in (a, b)] == ["queued", "queued"]


async def test_a_dead_workers_job_is_reclaimed_and_delivered_once(
    make_redis: Make, redis: aioredis.Redis
) -> None:
    replica = make_redis()
    await replica.start(idle_runner)
    j = job()
    replica.submit(j)
    assert await replica.enqueued(j.id)
    # a worker reads the job and dies before acknowledging it
    got: Any = await redis.xreadgroup(GROUP, "dead-worker", {replica.stream: ">"}, count=1)
    assert len(got[0][1]) == 1
    runner = TierRunner([cloud_tier()])
    # min_idle 1 ms on the broker's clock: the dead worker's job is idle long enough
    survivor = make_redis(consume=True, min_idle_ms=1)
    await survivor.start(runner)
    async with asyncio.timeout(5):
        done = await replica.store.wait(j.id)
    assert (done.status, done.text) == ("done", "deep answer")
    (record,) = await replica.records([j.id])
    assert record is not None and record["attempts"] == 1  # begun once: the dead one never began
    assert await redis.xlen(replica.stream) == 0  # acknowledged and deleted
    assert replica.stats["delivered"] == 1


async def test_double_delivery_stores_once_and_the_caller_gets_it_once(
    make_redis: Make, redis: aioredis.Redis
) -> None:
    replica = make_redis()
    await replica.start(idle_runner)
    j = job()
    replica.submit(j)
    replica.submit(Job(j.id, "cloud", Request(input="again"), 5_000.0))  # resubmitted
    assert await replica.enqueued(j.id)
    await asyncio.sleep(0)
    assert await redis.xlen(replica.stream) == 1  # the same id is queued once
    # worker A takes the job, stores its result, then dies before the acknowledgement
    await redis.xreadgroup(GROUP, "worker-a", {replica.stream: ">"}, count=1)
    first = Job(j.id, "cloud", None, 0.0, status="done", text="first answer")
    dead = make_redis()
    assert await dead._store(first, replica.replica)  # what worker A did before dying
    second = Job(j.id, "cloud", None, 0.0, status="done", text="second answer")
    assert not await dead._store(second, replica.replica)  # a later result is not stored
    async with asyncio.timeout(5):
        delivered = await replica.store.wait(j.id)
    assert delivered.text == "first answer"
    # worker B is handed the job again: it sees the stored result and only acknowledges
    tier = cloud_tier()
    b = make_redis(consume=True, min_idle_ms=1)
    await b.start(TierRunner([tier]))
    # (with min_idle_ms=1, B may reclaim its own entry once more before its acknowledgement
    # lands, and skip it twice: still never run, and delivered once)
    await eventually(lambda: b.stats["skipped"] >= 1)
    for _ in range(1000):  # Redis's own progress (5 s at most): no event to wait on
        if not await redis.xlen(replica.stream):
            break
        await asyncio.sleep(0.005)
    assert await redis.xlen(replica.stream) == 0  # acknowledged and deleted
    assert tier.calls == 0 and b.stats["processed"] == 0
    # a stray second announcement is ignored by the replica's store
    stray = json.dumps({"id": j.id, "status": "done", "text": "stray"})
    await redis.publish(replica.channel(replica.replica), stray)
    await eventually(lambda: replica.stats["duplicates"] == 1)
    assert replica.store.get(j.id).text == "first answer"
    assert replica.stats["delivered"] == 1


async def test_a_job_that_keeps_killing_workers_is_given_up(
    make_redis: Make, redis: aioredis.Redis
) -> None:
    replica = make_redis()
    await replica.start(idle_runner)
    j = job()
    replica.submit(j)
    assert await replica.enqueued(j.id)
    await redis.hset(replica.key(j.id), "attempts", 5)  # five workers began it and died
    tier = cloud_tier()
    worker = make_redis(consume=True, max_deliveries=5)
    await worker.start(TierRunner([tier]))
    async with asyncio.timeout(5):
        done = await replica.store.wait(j.id)
    assert done.status == "failed" and "gave up after 5" in (done.error or "")
    assert tier.calls == 0


async def test_unserialisable_request_fails_the_job_not_the_gate(make_redis: Make) -> None:
    q = make_redis()
    await q.start(idle_runner)
    j = Job(new_job_id(), "cloud", Request(input="x", meta={"obj": object()}), 1000.0)
    q.submit(j)
    assert j.status == "failed" and (j.error or "").startswith(REFUSED)
    assert not await q.enqueued(j.id)


async def test_a_live_worker_keeps_only_its_own_jobs(
    make_redis: Make, redis: aioredis.Redis
) -> None:
    replica = make_redis()
    await replica.start(idle_runner)
    mine, theirs = job("mine"), job("theirs")
    for j in (mine, theirs):
        replica.submit(j)
        assert await replica.enqueued(j.id)
    a = make_redis(consume=True)
    await a.connect()
    (d,) = await a._fetch(1)  # worker A is running `mine`
    assert d.job.id == mine.id
    await redis.xreadgroup(GROUP, "worker-b", {replica.stream: ">"}, count=1)  # B: `theirs`
    pending = await redis.xpending_range(replica.stream, GROUP, "-", "+", 10)
    for e in pending:  # both silent for 100 s, on the broker's clock
        owner, entry_id = str(e["consumer"]), str(e["message_id"])
        await redis.xclaim(replica.stream, GROUP, owner, 0, [entry_id], idle=100_000, justid=True)
    await a._touch([d])  # A's heartbeat: refreshes its own job, leaves B's alone
    rows = await redis.xpending_range(replica.stream, GROUP, "-", "+", 10)
    by_consumer = {str(r["consumer"]): int(r["time_since_delivered"]) for r in rows}
    assert by_consumer[a.replica] < 10_000 and by_consumer["worker-b"] >= 100_000
    c = make_redis(consume=True, min_idle_ms=50_000)
    await c.connect()
    reclaimed = await c.reclaim(10)  # only the silent job (B's) is taken over
    assert [x.job.id for x in reclaimed] == [theirs.id]


async def test_a_lookup_finishes_a_job_whose_announcement_was_lost(make_redis: Make) -> None:
    replica = make_redis(poll_s=60.0)  # no reconciling during the test
    await replica.start(idle_runner)
    j = job()
    replica.submit(j)
    assert await replica.enqueued(j.id)
    waiter = asyncio.create_task(replica.store.wait(j.id))
    worker = make_redis()
    result = Job(j.id, "cloud", None, 0.0, status="done", text="deep answer")
    assert await worker._store(result, "a-replica-that-is-gone")  # announced elsewhere
    found = await replica.lookup(j.id)
    assert found is j and j.status == "done"
    async with asyncio.timeout(5):
        assert (await waiter).text == "deep answer"  # the waiting caller is woken
    assert replica.stats["delivered"] == 1


async def test_a_cancelled_job_is_not_started_by_any_worker(make_redis: Make) -> None:
    replica = make_redis()
    await replica.start(idle_runner)
    j = job()
    replica.submit(j)
    assert await replica.enqueued(j.id)
    assert await replica.cancel(j.id)
    assert j.status == "cancelled" and not await replica.cancel(j.id)
    tier = cloud_tier()
    worker = make_redis(consume=True)
    await worker.start(TierRunner([tier]))
    await eventually(lambda: worker.stats["skipped"] == 1)
    assert tier.calls == 0
    other = make_redis()
    found = await other.lookup(j.id)  # every replica sees it cancelled
    assert found is not None and found.status == "cancelled"
