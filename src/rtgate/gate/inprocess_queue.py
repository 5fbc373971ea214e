"""The default job queue: an in-process bounded queue drained by a few worker tasks.

Policy when full: the newcomer is refused (``QueueFull``) at once; the caller already has
its in-budget answer, and the trace records that no deeper answer will follow. Jobs
already queued are never dropped.
"""

from __future__ import annotations

import asyncio

from rtgate.core.errors import QueueFull
from rtgate.gate.jobs import Job, JobQueue, JobRunner

__all__ = ["InProcessQueue"]


class InProcessQueue(JobQueue):
    def __init__(self, maxsize: int = 256, workers: int = 2) -> None:
        if maxsize < 1 or workers < 1:
            raise ValueError("maxsize and workers must be >= 1")
        self.maxsize = maxsize
        self.workers = workers
        self._queue: asyncio.Queue[Job] = asyncio.Queue(maxsize)
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self, runner: JobRunner) -> None:
        for i in range(self.workers):
            self._tasks.append(asyncio.create_task(self._work(runner), name=f"rtgate-worker-{i}"))

    async def _work(self, runner: JobRunner) -> None:
        while True:
            job = await self._queue.get()
            try:
                await runner(job)
            finally:
                self._queue.task_done()

    def submit(self, job: Job) -> None:
        try:
            self._queue.put_nowait(job)
        except asyncio.QueueFull:
            raise QueueFull(f"delegation queue full ({self.maxsize} jobs waiting)") from None

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    async def aclose(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
