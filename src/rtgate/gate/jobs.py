"""Delegated jobs: the slow tier's answer, produced in the background.

A :class:`JobQueue` takes jobs and runs them with a runner the gate supplies; results land
in a :class:`JobStore` where callers wait for them or look them up by id. The in-process
queue is the default; Redis Streams and NATS JetStream queues implement the same interface
and, being shared by every gate replica, also answer for jobs submitted elsewhere
(:func:`find_job`, :func:`wait_job`): the interface's defaults are what a queue that keeps
nothing outside this process answers, so no caller needs to know which queue it has.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from rtgate.core.errors import JobNotFound

__all__ = [
    "Job",
    "JobQueue",
    "JobRunner",
    "JobStatus",
    "JobStore",
    "find_job",
    "new_job_id",
    "wait_job",
]

JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]


def new_job_id() -> str:
    """An id nobody can guess or count to: 128 random bits. With an owner on its request
    (``meta["owner"]``, see :attr:`Job.owner`) only that owner may read or cancel it."""
    return f"job-{secrets.token_urlsafe(16)}"


@dataclass(slots=True)
class Job:
    """A delegated request and, once finished, its result."""

    id: str
    tier: str
    request: Any  # rtgate.tiers.base.Request, or its dict form on a wire
    budget_ms: float
    status: JobStatus = "queued"
    text: str = ""
    data: list[Mapping[str, Any]] = field(default_factory=list)
    error: str | None = None
    created: float = field(default_factory=time.time)
    finished: float | None = None
    ttft_ms: float | None = None
    elapsed_ms: float | None = None

    @property
    def finished_ok(self) -> bool:
        return self.status == "done"

    @property
    def owner(self) -> str | None:
        """Who may read or cancel it (the request's ``meta["owner"]``: an API key id), or
        ``None``: whoever holds its id (an open server)."""
        meta = getattr(self.request, "meta", None)
        if meta is None and isinstance(self.request, Mapping):
            meta = self.request.get("meta")
        owner = meta.get("owner") if isinstance(meta, Mapping) else None
        return owner if isinstance(owner, str) else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tier": self.tier,
            "status": self.status,
            "text": self.text,
            "data": [dict(d) for d in self.data],
            "error": self.error,
            "created": self.created,
            "finished": self.finished,
            "ttft_ms": self.ttft_ms,
            "elapsed_ms": self.elapsed_ms,
        }


JobRunner = Callable[[Job], Awaitable[None]]
"""Runs a job to completion, filling in its result fields."""


class JobStore:
    """Jobs by id, bounded: past ``max_jobs`` the oldest *finished* jobs are forgotten."""

    def __init__(self, max_jobs: int = 10_000) -> None:
        self.max_jobs = max_jobs
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._done: dict[str, asyncio.Event] = {}

    def __len__(self) -> int:
        return len(self._jobs)

    def add(self, job: Job) -> None:
        self._jobs[job.id] = job
        self._done[job.id] = asyncio.Event()
        if len(self._jobs) > self.max_jobs:
            for jid, old in list(self._jobs.items()):
                if len(self._jobs) <= self.max_jobs:
                    break
                if old.status in ("done", "failed", "cancelled"):
                    del self._jobs[jid]
                    self._done.pop(jid, None)

    def ids(self) -> list[str]:
        return list(self._jobs)

    def get(self, job_id: str) -> Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise JobNotFound(f"no job {job_id!r}") from None

    def find(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def finish(self, job: Job) -> None:
        self._jobs[job.id] = job
        ev = self._done.get(job.id)
        if ev is not None:
            ev.set()

    async def wait(self, job_id: str) -> Job:
        job = self.get(job_id)
        ev = self._done.get(job_id)
        if ev is not None and job.status not in ("done", "failed", "cancelled"):
            await ev.wait()
        return self.get(job_id)


class JobQueue(ABC):
    """Where delegated jobs wait for a worker. Bounded; ``submit`` raises ``QueueFull``."""

    @abstractmethod
    async def start(self, runner: JobRunner) -> None:
        """Start consuming jobs with ``runner``."""

    @abstractmethod
    def submit(self, job: Job) -> None:
        """Enqueue without waiting; raise :class:`~rtgate.core.errors.QueueFull` when full."""

    @abstractmethod
    async def aclose(self) -> None:
        """Stop consuming; jobs in flight are cancelled and marked failed."""

    @property
    @abstractmethod
    def depth(self) -> int:
        """Jobs waiting for a worker."""

    # -- what a queue shared by replicas adds; the defaults suit a queue in this process --

    @property
    def remote(self) -> bool:
        """Jobs run in other processes and their record is kept there (a broker): finding,
        waiting for and cancelling a job goes through the queue."""
        return False

    @property
    def replica(self) -> str:
        """This process's name among the queue's replicas ("" when not shared)."""
        return ""

    async def enqueued(self, job_id: str) -> bool:
        """Wait until a submitted job is safely queued: True, or False if it was refused.
        In process, a job is queued once ``submit`` returns."""
        return True

    async def lookup(self, job_id: str) -> Job | None:
        """The job as the queue knows it, wherever it was submitted, or ``None``."""
        return None

    async def follow(self, job_id: str) -> Job:
        """Wait for a job submitted anywhere to finish. Raises ``JobNotFound``."""
        raise JobNotFound(f"no job {job_id!r}")

    async def cancel(self, job_id: str) -> bool:
        """Cancel a job where the queue keeps it, so no worker starts it. False if it had
        already finished (or the queue keeps nothing: the gate cancels its own jobs)."""
        return False


async def find_job(queue: JobQueue, store: JobStore, job_id: str) -> Job:
    """A job from this process's ``store``, else from the queue (submitted by any
    replica). Raises ``JobNotFound``. For ``GET /v1/jobs/{id}``."""
    job = store.find(job_id)
    if job is None:
        job = await queue.lookup(job_id)
    if job is None:
        raise JobNotFound(f"no job {job_id!r}")
    return job


async def wait_job(queue: JobQueue, store: JobStore, job_id: str) -> Job:
    """Wait for a job to finish, wherever it was submitted (a caller that reconnected
    to another replica). Raises ``JobNotFound``."""
    if store.find(job_id) is None:
        return await queue.follow(job_id)
    return await store.wait(job_id)
