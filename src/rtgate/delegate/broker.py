"""What the Redis Streams and NATS JetStream job queues share.

A :class:`BrokerQueue` plays one or both roles:

* **gate replica** (``consume=False``): ``submit`` puts a job in a bounded outbox that a
  background task moves to the broker; results come back on this replica's own channel
  and finish the job in the replica's :class:`JobStore` — once: a second announcement of
  the same job is ignored. A reconciler polls the broker's result store for jobs still
  waiting, so an announcement lost with a connection is still delivered.
* **worker** (``consume=True``): takes jobs from the broker (at most ``concurrency`` at a
  time), runs them with the runner, stores the result (the first result stored wins),
  announces it to the replica named in the job, and acknowledges the job last. A worker
  that dies before acknowledging leaves the job to another worker: jobs are processed at
  least once and delivered once.

A broker queue is ``remote``: any replica finds (``lookup``), follows (``follow``) and
cancels (``cancel``) any job, whichever replica submitted it; callers reach these through
the :class:`~rtgate.gate.jobs.JobQueue` interface and :class:`~rtgate.gate.Gate`
(``find_job``, ``wait_job``, ``stop_job``), never by checking the queue's class.

Policy when full: ``submit`` refuses the newcomer with ``QueueFull`` when the outbox or
the broker's last reported depth is at ``maxsize``; the broker enforces the same bound
atomically, and a job it refuses is finished as failed (``error`` says why). Jobs already
queued are never dropped. A job given up after ``max_deliveries`` deliveries (a job that
keeps killing its worker) is finished as failed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from rtgate.core.errors import InvalidRequest, JobNotFound, QueueFull
from rtgate.delegate.codec import apply_result, decode_result, encode_job
from rtgate.gate.jobs import Job, JobQueue, JobRunner, JobStore

__all__ = ["REFUSED", "BrokerQueue", "Delivery", "default_replica_id"]

log = logging.getLogger("rtgate.delegate")

REFUSED = "delegation refused"
"""Prefix of ``Job.error`` for a job the broker refused (queue full)."""

_FINISHED = ("done", "failed", "cancelled")


def default_replica_id() -> str:
    """``host-pid-random``: unique per process, safe in Redis keys and NATS subjects."""
    raw = f"{socket.gethostname()}-{os.getpid()}-{os.urandom(2).hex()}"
    return re.sub(r"[^A-Za-z0-9_-]", "-", raw)


@dataclass(slots=True)
class Delivery:
    """A job handed to this worker, with the broker's handle to acknowledge it."""

    job: Job
    reply: str
    handle: Any
    deliveries: int = 1


class BrokerQueue(JobQueue, ABC):
    """A :class:`JobQueue` on an external broker (see the module docstring)."""

    broker = "broker"

    def __init__(
        self,
        *,
        maxsize: int = 1024,
        store: JobStore | None = None,
        consume: bool = False,
        concurrency: int = 8,
        outbox: int = 256,
        replica: str | None = None,
        poll_s: float = 1.0,
        max_deliveries: int = 5,
    ) -> None:
        if maxsize < 1 or concurrency < 1 or outbox < 1 or max_deliveries < 1:
            raise ValueError("maxsize, concurrency, outbox and max_deliveries must be >= 1")
        self.maxsize = maxsize
        self.store = store if store is not None else JobStore()
        self.consume = consume
        self.concurrency = concurrency
        self.outbox_size = outbox
        self._replica = replica or default_replica_id()
        self.poll_s = poll_s
        self.max_deliveries = max_deliveries
        self.stats: dict[str, int] = dict.fromkeys(
            ("sent", "refused", "delivered", "duplicates", "processed", "skipped", "gave_up"), 0
        )
        self._depth = 0
        self._outbox: deque[tuple[Job, bytes]] = deque()
        self._sending: dict[str, asyncio.Future[bool]] = {}
        self._wake = asyncio.Event()
        self._waiting: set[str] = set()
        self._inflight: dict[str, Delivery] = {}
        self._slot_free = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._runs: set[asyncio.Task[None]] = set()
        self._runner: JobRunner | None = None
        self._connected = False
        self._stopping = False

    @property
    def remote(self) -> bool:
        return True

    @property
    def replica(self) -> str:
        return self._replica

    # -- what a broker implements ----------------------------------------------------------

    @abstractmethod
    async def _connect(self) -> None:
        """Open connections and create the stream, group or bucket if missing."""

    @abstractmethod
    async def _disconnect(self) -> None: ...

    @abstractmethod
    async def _enqueue(self, batch: list[tuple[Job, bytes]]) -> list[bool]:
        """Put jobs on the broker: True when queued (or already there), False if refused."""

    @abstractmethod
    def _notifications(self) -> AsyncIterator[bytes]:
        """Results announced to this replica, until the connection fails."""

    @abstractmethod
    async def _lookup_many(self, ids: list[str]) -> list[dict[str, Any] | None]:
        """Each job's record on the broker (a result dict), ``None`` when unknown."""

    @abstractmethod
    async def _fetch(self, n: int) -> list[Delivery]:
        """Up to ``n`` jobs for this worker, waiting about a second at most."""

    @abstractmethod
    async def _begin(self, d: Delivery) -> bool:
        """Mark the job running; False when it is already finished (just acknowledge)."""

    @abstractmethod
    async def _store(self, job: Job, reply: str) -> bool:
        """Store the result unless one is stored already; announce it if stored."""

    @abstractmethod
    async def _ack(self, d: Delivery) -> None: ...

    @abstractmethod
    async def _touch(self, ds: list[Delivery]) -> None:
        """Tell the broker these jobs are still being worked on."""

    async def _refresh_depth(self) -> None:
        """Update ``_depth`` from the broker when it is not reported on submit."""

    touch_every_s = 5.0

    # -- lifecycle -------------------------------------------------------------------------

    async def connect(self) -> None:
        if not self._connected:
            await self._connect()
            self._connected = True

    async def start(self, runner: JobRunner) -> None:
        await self.connect()
        self._runner = runner
        self._spawn(self._flush_loop(), "flush")
        self._spawn(self._listen_loop(), "listen")
        self._spawn(self._reconcile_loop(), "reconcile")
        if self.consume:
            self._spawn(self._fetch_loop(runner), "fetch")
            self._spawn(self._touch_loop(), "touch")

    def _spawn(self, coro: Coroutine[Any, Any, None], what: str) -> None:
        name = f"rtgate-{self.broker}-{what}"
        self._tasks.append(asyncio.create_task(coro, name=name))

    async def drain(self, timeout_s: float) -> None:
        """Stop taking jobs and give those running ``timeout_s`` to finish."""
        self._stopping = True
        if self._runs:
            await asyncio.wait(set(self._runs), timeout=timeout_s)

    async def aclose(self) -> None:
        """Stop. Jobs still running are cancelled *without* acknowledgement, so another
        worker runs them; jobs still in the outbox get one second to reach the broker."""
        self._stopping = True
        if self._sending and self._connected:
            self._wake.set()
            pending = list(self._sending.values())
            await asyncio.wait(pending, timeout=1.0)
        tasks = [*self._tasks, *self._runs]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        while self._outbox:
            job, _ = self._outbox.popleft()
            self._refuse(job, "queue closed before the job reached the broker")
        for fut in self._sending.values():  # in a batch cut short: it may or may not be queued
            if not fut.done():
                fut.set_result(False)
        self._sending.clear()
        await self._disconnect()
        self._connected = False

    # -- gate side -------------------------------------------------------------------------

    @property
    def depth(self) -> int:
        return self._depth + len(self._outbox)

    def submit(self, job: Job) -> None:
        if self._stopping:
            raise QueueFull("delegation queue is closing")
        if len(self._outbox) >= self.outbox_size:
            raise QueueFull(f"delegation outbox full ({self.outbox_size} jobs not yet sent)")
        if self.depth >= self.maxsize:
            raise QueueFull(f"delegation queue full ({self.maxsize} jobs on {self.broker})")
        if self.store.find(job.id) is None:
            self.store.add(job)
        try:
            payload = encode_job(job, self.replica)
        except InvalidRequest as e:
            self._fail(job, f"{REFUSED}: {e}")
            return
        self._sending[job.id] = asyncio.get_running_loop().create_future()
        self._outbox.append((job, payload))
        self._wake.set()

    async def enqueued(self, job_id: str) -> bool:
        """Wait until ``job_id`` is on the broker: True, or False if it was refused."""
        fut = self._sending.get(job_id)
        if fut is not None:
            return await asyncio.shield(fut)
        job = self.store.find(job_id)
        return job is not None and not (job.error or "").startswith(REFUSED)

    async def lookup(self, job_id: str) -> Job | None:
        """The job as the broker knows it (any replica can answer), or ``None``."""
        local = self.store.find(job_id)
        if local is not None and local.status in _FINISHED:
            return local
        (record,) = await self._lookup_many([job_id])
        if record is None:
            return local
        if local is not None:
            self._deliver(record)  # finishes the local job (once) if the record is a result
            return local
        owner = record.get("owner")  # who may read it, on every replica (Job.owner)
        request = {"meta": {"owner": owner}} if isinstance(owner, str) else None
        return apply_result(Job(job_id, str(record.get("tier", "")), request, 0.0), record)

    async def cancel(self, job_id: str) -> bool:
        """Cancel a job wherever it is: finished here as ``cancelled``, and recorded so on
        the broker so no worker starts it (one already running finishes, unannounced).
        False if the job had already finished."""
        job = self.store.find(job_id) or await self.lookup(job_id)
        if job is None:
            raise JobNotFound(f"no job {job_id!r}")
        if job.status in _FINISHED:
            return False
        job.status, job.error, job.finished = "cancelled", "cancelled by the caller", time.time()
        self._waiting.discard(job_id)
        if self.store.find(job_id) is not None:
            self.store.finish(job)
        return bool(await self._store(job, ""))

    async def records(self, job_ids: list[str]) -> list[dict[str, Any] | None]:
        """The broker's records of these jobs (result fields plus ``attempts``)."""
        out: list[dict[str, Any] | None] = []
        for start in range(0, len(job_ids), 256):
            out += await self._lookup_many(job_ids[start : start + 256])
        return out

    async def follow(self, job_id: str) -> Job:
        """Wait for a job submitted anywhere (e.g. by a replica that died) to finish."""
        job = self.store.find(job_id)
        if job is None:
            found = await self.lookup(job_id)
            if found is None:
                raise JobNotFound(f"no job {job_id!r}")
            job = found
            self.store.add(job)
            if job.status in _FINISHED:
                self.store.finish(job)
        if job.status not in _FINISHED:
            self._waiting.add(job_id)
        return await self.store.wait(job_id)

    def _fail(self, job: Job, error: str) -> None:
        job.status, job.error, job.finished = "failed", error, time.time()
        self.store.finish(job)

    def _refuse(self, job: Job, why: str) -> None:
        self.stats["refused"] += 1
        self._fail(job, f"{REFUSED}: {why}")
        fut = self._sending.pop(job.id, None)
        if fut is not None and not fut.done():
            fut.set_result(False)

    async def _flush_loop(self) -> None:
        backoff = 0.05
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._outbox:
                batch = [self._outbox.popleft() for _ in range(min(64, len(self._outbox)))]
                try:
                    accepted = await self._enqueue(batch)
                except Exception as e:
                    n = len(batch)
                    log.warning("%s: cannot send %d jobs (%s); retrying", self.broker, n, e)
                    self._outbox.extendleft(reversed(batch))
                    await asyncio.sleep(backoff)
                    backoff = min(2.0, backoff * 2)
                    continue
                backoff = 0.05
                for (job, _), ok in zip(batch, accepted, strict=True):
                    if not ok:
                        self._refuse(job, f"{self.broker} queue full ({self.maxsize} jobs)")
                        continue
                    self.stats["sent"] += 1
                    if job.status not in _FINISHED:
                        self._waiting.add(job.id)
                    fut = self._sending.pop(job.id, None)
                    if fut is not None and not fut.done():
                        fut.set_result(True)

    def _deliver(self, record: Mapping[str, Any]) -> None:
        """Finish the local job from a result record, once."""
        job_id = str(record.get("id"))
        self._waiting.discard(job_id)
        job = self.store.find(job_id)
        if job is None:
            return
        if job.status in _FINISHED:
            self.stats["duplicates"] += 1
            return
        apply_result(job, record)
        if job.status not in _FINISHED:  # a progress record, not a result
            self._waiting.add(job_id)
            return
        self.stats["delivered"] += 1
        self.store.finish(job)

    async def _listen_loop(self) -> None:
        while not self._stopping:
            try:
                async for raw in self._notifications():
                    try:
                        self._deliver(decode_result(raw))
                    except (InvalidRequest, ValueError) as e:
                        log.warning("%s: bad result message ignored: %s", self.broker, e)
            except Exception as e:
                if self._stopping:
                    return
                log.warning("%s: result channel lost (%s); reconnecting", self.broker, e)
            await asyncio.sleep(0.2)
            await self._reconcile()

    async def _reconcile_loop(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                await self._refresh_depth()
                await self._reconcile()
            except Exception as e:
                log.warning("%s: reconcile failed: %s", self.broker, e)

    async def _reconcile(self) -> None:
        ids = [i for i in self._waiting if i not in self._sending]
        for start in range(0, len(ids), 256):
            chunk = ids[start : start + 256]
            for job_id, record in zip(chunk, await self._lookup_many(chunk), strict=True):
                if record is None:
                    job = self.store.find(job_id)
                    self._waiting.discard(job_id)
                    if job is not None and job.status not in _FINISHED:
                        self._fail(job, f"job lost: no record of it on {self.broker}")
                elif record.get("status") in _FINISHED:
                    self._deliver(record)

    # -- worker side -----------------------------------------------------------------------

    async def _fetch_loop(self, runner: JobRunner) -> None:
        backoff = 0.05
        while not self._stopping:
            free = self.concurrency - len(self._inflight)
            if free <= 0:
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            try:
                got = await self._fetch(free)
            except Exception as e:
                log.warning("%s: fetch failed (%s); retrying", self.broker, e)
                await asyncio.sleep(backoff)
                backoff = min(2.0, backoff * 2)
                continue
            backoff = 0.05
            for d in got:
                if d.job.id in self._inflight:  # handed to us again while running: keep one
                    continue
                self._inflight[d.job.id] = d
                task = asyncio.create_task(self._handle(d, runner), name=f"rtgate-job-{d.job.id}")
                self._runs.add(task)
                task.add_done_callback(self._runs.discard)

    async def _handle(self, d: Delivery, runner: JobRunner) -> None:
        job = d.job
        try:
            if not await self._begin(d):
                self.stats["skipped"] += 1  # finished by an earlier delivery
                await self._ack(d)
                return
            if d.deliveries > self.max_deliveries:
                self.stats["gave_up"] += 1
                job.status = "failed"
                job.error = f"gave up after {d.deliveries - 1} deliveries"
                job.finished = time.time()
            else:
                try:
                    await runner(job)
                except Exception as e:
                    job.status, job.error = "failed", f"{type(e).__name__}: {e}"
                if job.status not in _FINISHED:
                    job.status = "failed"
                    job.error = job.error or "runner returned without finishing the job"
            job.finished = job.finished or time.time()
            self.stats["processed"] += 1
            await self._retry(lambda: self._store(job, d.reply))
            await self._ack(d)
        except asyncio.CancelledError:
            raise  # not acknowledged: the broker hands the job to another worker
        except Exception as e:
            log.warning("%s: job %s left unacknowledged: %s", self.broker, job.id, e)
        finally:
            self._inflight.pop(job.id, None)
            self._slot_free.set()

    async def _retry(self, call: Any, attempts: int = 3) -> Any:
        for i in range(attempts):
            try:
                return await call()
            except Exception:
                if i == attempts - 1:
                    raise
                await asyncio.sleep(0.1 * 2**i)

    async def _touch_loop(self) -> None:
        while True:
            await asyncio.sleep(self.touch_every_s)
            if self._inflight:
                try:
                    await self._touch(list(self._inflight.values()))
                except Exception as e:
                    log.warning("%s: cannot extend in-flight jobs: %s", self.broker, e)
