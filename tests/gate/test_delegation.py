"""Delegated jobs through the gate's public methods, the same with any job queue."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined, JobNotFound, NotYet
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.gate import Gate
from rtgate.gate.inprocess_queue import InProcessQueue
from rtgate.tiers.base import Tier
from rtgate.tiers.fake import FakeTier


def gate() -> Gate:
    cloud = FakeTier("cloud", 80, ["deep"], ttft_ms=5, delegable=True)
    template = FakeTier("template", 10, ["canned"])
    priors = {"cloud": Prior(1800, 1800), "template": Prior(1, 1)}
    return Gate([cloud, template], priors=priors, queue=InProcessQueue())


async def test_a_job_is_found_counted_and_awaited_by_id() -> None:
    async with gate() as g:
        assert g.job_count == 0 and g.job_ids() == []
        res = await g.answer(Request("q"), 100)
        assert res.route == "template" and res.job_id is not None
        assert await g.job_queued(res.job_id)  # in process: queued once submitted
        assert g.job_count == 1 and g.job_ids() == [res.job_id]
        found = g.job(res.job_id)
        assert found is not None and found is await g.find_job(res.job_id)
        done = await g.wait_job(res.job_id)
        assert done.status == "done" and done.text == "deep"


async def test_an_unknown_job_is_not_found_and_stopping_it_is_harmless() -> None:
    async with gate() as g:
        assert g.job("job-unknown") is None
        with pytest.raises(JobNotFound):
            await g.find_job("job-unknown")
        with pytest.raises(JobNotFound):
            await g.wait_job("job-unknown")
        g.stop_job("job-unknown")  # never raises


class Hangs(Tier):
    """A delegable cloud that says when a job has started it, then never answers."""

    name, quality, delegable = "cloud", 80, True

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        self.started.set()
        await asyncio.Event().wait()
        yield "never"


async def test_stop_job_cancels_a_job_in_process_at_once() -> None:
    cloud = Hangs()
    priors = {"cloud": Prior(1800, 1800), "template": Prior(1, 1)}
    tiers = [cloud, FakeTier("template", 10, ["canned"])]
    async with Gate(tiers, priors=priors, queue=InProcessQueue(workers=1)) as g:
        a = await g.answer(Request("a"), 100)
        assert a.job_id is not None
        await cloud.started.wait()  # the one worker runs a
        b = await g.answer(Request("b"), 100)
        assert b.job_id is not None
        g.stop_job(b.job_id)  # queued behind a: cancelled on the spot
        b_job = g.job(b.job_id)
        assert b_job is not None and b_job.status == "cancelled"
        g.stop_job(a.job_id)  # running: its task is cancelled
        assert (await g.wait_job(a.job_id)).status == "cancelled"


async def test_what_a_replica_shares() -> None:
    g = gate()
    assert g.replica == ""  # the in-process queue is not shared
    assert g.latency_models() is g.models  # live: what SharedLatency loads into
    assert [t.name for t in g.tiers] == ["cloud", "template"]


class Reads(Tier):
    """A fast tier that cannot read an input ending in "…": still being written
    (``NotYet``), or, as a plain miss, anything ending in "?" it does not know."""

    name, quality = "local", 30

    def __init__(self, instant: bool = False) -> None:
        self.instant = instant

    def answer_now(self, request: Request) -> Piece:
        if request.input.endswith("…"):
            raise NotYet("local: not readable yet")
        raise Declined("local: no idea")

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        yield self.answer_now(request)


@pytest.mark.parametrize("instant", [False, True])
async def test_an_input_declined_as_not_whole_yet_starts_no_job(instant: bool) -> None:
    cloud = FakeTier("cloud", 80, ["deep"], ttft_ms=5, delegable=True)
    priors = {"cloud": Prior(1800, 1800), "local": Prior(1, 1)}
    async with Gate([cloud, Reads(instant)], priors=priors, queue=InProcessQueue()) as g:
        typing = await g.answer(Request("my card was charged twice and …", delegate=True), 100)
        assert typing.route == "silent" and typing.job_id is None and g.job_count == 0
        assert "not whole yet" in (typing.trace.degraded or "")
        whole = await g.answer(Request("my card was charged twice and?", delegate=True), 100)
        assert whole.route == "silent" and whole.job_id is not None  # a plain miss: delegated
        assert (await g.wait_job(whole.job_id)).text == "deep"
