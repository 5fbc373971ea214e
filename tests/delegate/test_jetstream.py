"""Delegation on the real NATS JetStream: results, the bound, dead workers, duplicates."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from rtgate.core.errors import QueueFull
from rtgate.core.latency import Prior
from rtgate.core.request import Request
from rtgate.delegate.broker import REFUSED
from rtgate.delegate.jetstream import DURABLE, JetStreamQueue
from rtgate.gate import Gate, GateConfig
from rtgate.gate.job_runner import TierRunner
from rtgate.gate.jobs import Job, JobStore
from rtgate.tiers.fake import FakeTier
from tests.delegate.delegate_helpers import cloud_tier, eventually, idle_runner, job

Make = Callable[..., JetStreamQueue]


async def test_gate_delegates_through_jetstream_and_a_worker_answers(make_nats: Make) -> None:
    store = JobStore()
    queue = make_nats(store=store)
    tiers = [FakeTier("template", 1, ["ok"]), FakeTier("cloud", 3, hang=True, delegable=True)]
    gate = Gate(
        tiers,
        config=GateConfig(probe_interval_ms=0),
        queue=queue,
        store=store,
        priors={"cloud": Prior(1800.0, 3000.0), "template": Prior(1.0, 1.0)},
    )
    worker = make_nats(consume=True)
    await worker.start(TierRunner([cloud_tier()]))
    async with gate, asyncio.timeout(5):
        result = await gate.answer(Request(input="limit?"), budget_ms=150)
        assert result.job_id is not None and await queue.enqueued(result.job_id)
        done = await gate.wait_job(result.job_id)
    assert (done.status, done.text) == ("done", "deep answer")
    other = make_nats()  # another replica reads the durable record from the KV bucket
    await other.connect()
    found = await other.lookup(done.id)
    assert found is not None and (found.status, found.text) == ("done", "deep answer")


async def test_full_stream_refuses_the_newcomer(make_nats: Make) -> None:
    q = make_nats(maxsize=2, poll_s=0.02)
    await q.start(idle_runner)
    a, b, c = job("a"), job("b"), job("c")
    q.submit(a)
    q.submit(b)
    assert await q.enqueued(a.id) and await q.enqueued(b.id)
    other = make_nats(maxsize=2)  # a replica that has not seen the stream fill up
    await other.start(idle_runner)
    other.submit(c)
    assert not await other.enqueued(c.id)  # discard=new: the stream refused it
    assert c.status == "failed" and (c.error or "").startswith(REFUSED)
    assert a.status == b.status == "queued"  # the queued jobs stay
    await eventually(lambda: q.depth == 2)  # the stream's count, read back
    with pytest.raises(QueueFull):
        q.submit(job("d"))


async def test_a_dead_workers_job_is_redelivered_and_delivered_once(make_nats: Make) -> None:
    replica = make_nats()
    await replica.start(idle_runner)
    j = job()
    replica.submit(j)
    assert await replica.enqueued(j.id)
    # a worker takes the job and dies without acknowledging it
    dead = make_nats(consume=True, ack_wait_s=0.2)
    await dead.connect()  # creates the durable consumer with a 0.2 s ack_wait
    assert dead._psub is not None
    (msg,) = await dead._psub.fetch(1, timeout=2)
    assert json.loads(msg.data)["id"] == j.id
    survivor = make_nats(consume=True, ack_wait_s=0.2)
    await survivor.start(TierRunner([cloud_tier()]))
    async with asyncio.timeout(5):  # the server redelivers after ack_wait (0.2 s)
        done = await replica.store.wait(j.id)
    assert (done.status, done.text) == ("done", "deep answer")
    (record,) = await replica.records([j.id])
    assert record is not None and record["attempts"] == 2  # the second delivery ran it
    info = await replica.js.consumer_info(replica.stream, DURABLE)
    assert info.num_ack_pending == 0 and info.num_pending == 0
    assert replica.stats["delivered"] == 1


async def test_double_delivery_stores_once_and_the_caller_gets_it_once(make_nats: Make) -> None:
    replica = make_nats()
    await replica.start(idle_runner)
    j = job()
    replica.submit(j)
    replica.submit(Job(j.id, "cloud", Request(input="again"), 5_000.0))  # resubmitted
    assert await replica.enqueued(j.id)
    info = await replica.js.stream_info(replica.stream)
    assert info.state.messages == 1  # Nats-Msg-Id: the same id is queued once
    worker_a = make_nats()
    await worker_a.connect()
    first = Job(j.id, "cloud", None, 0.0, status="done", text="first answer")
    assert await worker_a._store(first, replica.replica)  # worker A, then it dies
    second = Job(j.id, "cloud", None, 0.0, status="done", text="second answer")
    assert not await worker_a._store(second, replica.replica)  # not stored, not announced
    async with asyncio.timeout(5):
        delivered = await replica.store.wait(j.id)
    assert delivered.text == "first answer"
    tier = cloud_tier()
    worker_b = make_nats(consume=True)  # handed the job again: sees the result, acks
    await worker_b.start(TierRunner([tier]))
    await eventually(lambda: worker_b.stats["skipped"] == 1)
    assert tier.calls == 0
    assert replica.nc is not None
    stray = json.dumps({"id": j.id, "status": "done", "text": "stray"}).encode()
    await replica.nc.publish(replica.done_subject(replica.replica), stray)
    await eventually(lambda: replica.stats["duplicates"] == 1)
    assert replica.store.get(j.id).text == "first answer"
    assert replica.stats["delivered"] == 1


async def test_a_jobs_owner_is_known_to_every_replica(make_nats: Make) -> None:
    """Before and after a worker ran it, another replica reads who owns the job."""
    queue = make_nats()
    await queue.start(idle_runner)
    owned = Job("job-owned", "cloud", Request("hi", meta={"owner": "key:a"}), 2_000.0)
    queue.submit(owned)
    assert await queue.enqueued(owned.id)
    other = make_nats()
    await other.connect()
    found = await other.lookup(owned.id)
    assert found is not None and found.owner == "key:a"
    worker = make_nats(consume=True)
    await worker.start(TierRunner([cloud_tier()]))
    async with asyncio.timeout(5):
        await queue.follow(owned.id)  # the worker has announced its result
    after = await other.lookup(owned.id)
    assert after is not None and after.status == "done" and after.owner == "key:a"
