from __future__ import annotations

import asyncio

import pytest

from rtgate.core.errors import JobNotFound, QueueFull
from rtgate.gate.inprocess_queue import InProcessQueue
from rtgate.gate.jobs import Job, JobStore, new_job_id


def job() -> Job:
    return Job(new_job_id(), "cloud", None, 1000)


async def test_store_wait_returns_finished_job() -> None:
    store = JobStore()
    j = job()
    store.add(j)
    waiter = asyncio.create_task(store.wait(j.id))
    await asyncio.sleep(0)
    assert not waiter.done()
    j.status, j.text = "done", "hi"
    store.finish(j)
    assert (await waiter).text == "hi"


async def test_store_is_bounded_and_forgets_finished_first() -> None:
    store = JobStore(max_jobs=2)
    a, b, c = job(), job(), job()
    store.add(a)
    a.status = "done"
    store.add(b)
    store.add(c)
    assert len(store) == 2
    with pytest.raises(JobNotFound):
        store.get(a.id)
    assert store.get(b.id) is b


async def test_queue_refuses_when_full_and_runs_in_order() -> None:
    q = InProcessQueue(maxsize=2, workers=1)
    ran: list[str] = []
    gate_open = asyncio.Event()

    async def runner(j: Job) -> None:
        await gate_open.wait()
        ran.append(j.id)

    await q.start(runner)
    jobs = [job() for _ in range(4)]
    q.submit(jobs[0])
    await asyncio.sleep(0)  # worker takes the first
    q.submit(jobs[1])
    q.submit(jobs[2])
    with pytest.raises(QueueFull):
        q.submit(jobs[3])
    assert q.depth == 2
    gate_open.set()
    for _ in range(5):
        await asyncio.sleep(0)
    assert ran == [j.id for j in jobs[:3]]
    await q.aclose()


def test_queue_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError):
        InProcessQueue(maxsize=0)
