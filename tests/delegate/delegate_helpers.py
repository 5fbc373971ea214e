"""Helpers shared by the Redis Streams and NATS JetStream queue tests."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from rtgate.core.request import Request
from rtgate.gate.jobs import Job, new_job_id
from rtgate.tiers.fake import FakeTier


def job(text: str = "why?") -> Job:
    return Job(new_job_id(), "cloud", Request(input=text), 5_000.0)


def cloud_tier() -> FakeTier:
    return FakeTier("cloud", 3, ["deep ", "answer"], delegable=True)


async def idle_runner(job: Job) -> None:
    raise AssertionError("a gate-side queue runs no jobs")


async def eventually(check: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait for state that another party (the broker, a worker) changes."""
    async with asyncio.timeout(timeout_s):
        for _ in itertools.count():
            if check():
                return
            await asyncio.sleep(0.005)
