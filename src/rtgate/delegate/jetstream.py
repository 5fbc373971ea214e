"""Delegated jobs on NATS JetStream: a work-queue stream, a durable pull consumer, a KV.

Names, with ``prefix`` (default ``rtgate``; letters, digits, ``-`` and ``_``)::

    stream  {PREFIX}_JOBS      subject {prefix}.jobs; work-queue retention (an acked job
                               is deleted), max_msgs = maxsize, discard=new (refused)
    consumer "workers"         durable pull consumer, explicit ack, ack_wait
    KV      {prefix}_jobs      a record per job: queued → running → done/failed; TTL
    subject {prefix}.done.{replica}  results for the replica holding the caller

Policy when full: the stream refuses the newcomer (``discard=new``; the publish fails),
and the job is finished as failed. Duplicates: a job is published with ``Nats-Msg-Id`` set
to its id, so a resubmission within the stream's duplicate window is dropped; its result
is stored with a compare-and-set on the KV revision, so only the first result counts and
is announced. A worker that dies leaves its job unacknowledged: the server hands it out
again after ``ack_wait``; a live worker extends ``ack_wait`` with ``in_progress``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from typing import Any

import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import (
    ConsumerConfig,
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import (
    BadRequestError,
    KeyNotFoundError,
    KeyWrongLastSequenceError,
    ServiceUnavailableError,
)
from nats.js.kv import KeyValue

from rtgate.core.errors import ConfigError, InvalidRequest
from rtgate.delegate.broker import BrokerQueue, Delivery
from rtgate.delegate.codec import decode_job, encode_result
from rtgate.gate.jobs import Job

__all__ = ["JetStreamQueue"]

DURABLE = "workers"
log = logging.getLogger("rtgate.delegate")
_MAX_MSGS_EXCEEDED = 10077  # JetStream's error code for "maximum messages exceeded"
_FINISHED = ("done", "failed", "cancelled")


class JetStreamQueue(BrokerQueue):
    """A :class:`~rtgate.delegate.broker.BrokerQueue` on NATS JetStream.

    Args:
        url: ``nats://host:port`` (several comma-separated for a cluster).
        prefix: names, see the module docstring.
        result_ttl_s: how long a job's record stays in the KV bucket.
        ack_wait_s: a job unacknowledged this long is handed to another worker.
        memory: keep the stream and bucket in memory (tests), not on disk.
        num_replicas: copies of the stream and bucket in a JetStream cluster (3 in
            production, so a node can fail without losing a job).
        Other arguments: see :class:`BrokerQueue`.
    """

    broker = "nats"

    def __init__(
        self,
        url: str = "nats://127.0.0.1:4222",
        *,
        prefix: str = "rtgate",
        result_ttl_s: float = 86_400.0,
        ack_wait_s: float = 30.0,
        duplicate_window_s: float = 120.0,
        memory: bool = False,
        num_replicas: int = 1,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        if not re.fullmatch(r"[A-Za-z0-9_-]+", prefix):
            raise ConfigError(f"NATS prefix must be letters, digits, '-' or '_': {prefix!r}")
        self.url = url
        self.prefix = prefix
        self.result_ttl_s = result_ttl_s
        self.ack_wait_s = ack_wait_s
        self.duplicate_window_s = duplicate_window_s
        self.storage = StorageType.MEMORY if memory else StorageType.FILE
        self.num_replicas = num_replicas
        self.touch_every_s = max(0.05, ack_wait_s / 3.0)
        self.stream = f"{prefix.upper()}_JOBS"
        self.subject = f"{prefix}.jobs"
        self.bucket = f"{prefix}_jobs"
        self.nc: NATS | None = None
        self._js: JetStreamContext | None = None
        self._kv: KeyValue | None = None
        self._psub: JetStreamContext.PullSubscription | None = None

    def done_subject(self, replica: str) -> str:
        return f"{self.prefix}.done.{replica}"

    @property
    def js(self) -> JetStreamContext:
        assert self._js is not None, "not connected"
        return self._js

    @property
    def kv(self) -> KeyValue:
        assert self._kv is not None, "not connected"
        return self._kv

    async def _connect(self) -> None:
        self.nc = await nats.connect(
            self.url.split(","),
            name=f"rtgate-{self.replica}",
            connect_timeout=2,
            max_reconnect_attempts=2,  # fail fast when no server is up at start …
            error_cb=self._on_error,
        )
        self.nc.options["max_reconnect_attempts"] = -1  # … then reconnect for ever
        self._js = self.nc.jetstream()
        config = StreamConfig(
            name=self.stream,
            subjects=[self.subject],
            retention=RetentionPolicy.WORK_QUEUE,
            max_msgs=self.maxsize,
            discard=DiscardPolicy.NEW,
            storage=self.storage,
            duplicate_window=self.duplicate_window_s,
            num_replicas=self.num_replicas,
        )
        try:
            await self.js.add_stream(config)
        except BadRequestError:  # exists with other limits: adopt the new ones
            log.warning(
                "nats: stream %s had other limits; now max_msgs=%d", self.stream, self.maxsize
            )
            await self.js.update_stream(config)
        self._kv = await self.js.create_key_value(
            KeyValueConfig(
                bucket=self.bucket,
                ttl=self.result_ttl_s,
                storage=self.storage,
                replicas=self.num_replicas,
            )
        )
        if self.consume:
            self._psub = await self.js.pull_subscribe(
                self.subject,
                durable=DURABLE,
                stream=self.stream,
                config=ConsumerConfig(ack_wait=self.ack_wait_s, max_deliver=-1),
            )

    async def _on_error(self, e: Exception) -> None:
        log.warning("nats: %s: %s", type(e).__name__, e)

    async def _disconnect(self) -> None:
        if self.nc is not None:
            nc, self.nc = self.nc, None
            if nc.is_connected:
                with contextlib.suppress(Exception):
                    await nc.flush(timeout=2)  # results announced but still buffered
            await nc.close()

    def _record(self, job: Job, status: str, attempts: int = 0) -> bytes:
        d = job.to_dict()
        d["owner"] = job.owner
        d["status"] = status
        d["attempts"] = attempts
        return json.dumps(d, separators=(",", ":")).encode()

    async def _enqueue_one(self, job: Job, payload: bytes) -> bool:
        try:
            await self.kv.create(job.id, self._record(job, "queued"))
        except KeyWrongLastSequenceError:
            pass  # recorded by an earlier attempt; the publish below is deduplicated
        try:
            await self.js.publish(self.subject, payload, headers={"Nats-Msg-Id": job.id})
        except ServiceUnavailableError as e:
            if e.err_code != _MAX_MSGS_EXCEEDED:
                raise
            job.error = "queue full"
            await self.kv.put(job.id, self._record(job, "failed"))
            return False
        return True

    async def _enqueue(self, batch: list[tuple[Job, bytes]]) -> list[bool]:
        return list(await asyncio.gather(*(self._enqueue_one(j, p) for j, p in batch)))

    async def _refresh_depth(self) -> None:
        info = await self.js.stream_info(self.stream)
        self._depth = int(info.state.messages)

    async def _notifications(self) -> AsyncIterator[bytes]:
        assert self.nc is not None
        sub = await self.nc.subscribe(self.done_subject(self.replica), pending_msgs_limit=65_536)
        try:
            await self._reconcile()
            async for msg in sub.messages:
                yield msg.data
        finally:
            await sub.unsubscribe()

    async def _get(self, job_id: str) -> tuple[dict[str, Any], int] | None:
        try:
            entry = await self.kv.get(job_id)
        except KeyNotFoundError:
            return None
        if entry.value is None:
            return None
        return json.loads(entry.value), int(entry.revision or 0)

    async def _lookup_many(self, ids: list[str]) -> list[dict[str, Any] | None]:
        got = await asyncio.gather(*(self._get(i) for i in ids))
        return [None if g is None else g[0] for g in got]

    async def _fetch(self, n: int) -> list[Delivery]:
        assert self._psub is not None, "not a worker (consume=False)"
        try:
            msgs = await self._psub.fetch(n, timeout=1.0)
        except nats.errors.TimeoutError:
            return []
        out = []
        for msg in msgs:
            try:
                job, reply = decode_job(msg.data)
            except InvalidRequest:  # a poison message: drop it rather than loop on it
                await msg.term()
                self.stats["gave_up"] += 1
                continue
            out.append(Delivery(job, reply, msg, int(msg.metadata.num_delivered or 1)))
        return out

    async def _cas(self, job: Job, status: str, attempts: int | None = None) -> bool:
        """Write the job's record as ``status`` unless it is finished; False if it was."""
        for _ in range(5):
            got = await self._get(job.id)
            if got is not None and got[0].get("status") in _FINISHED:
                return False
            if attempts is None:
                attempts = int(got[0].get("attempts") or 0) if got is not None else 0
            value = self._record(job, status, attempts)
            try:
                if got is None:
                    await self.kv.create(job.id, value)
                else:
                    await self.kv.update(job.id, value, last=got[1])
                return True
            except KeyWrongLastSequenceError:
                continue  # someone wrote in between: look again
        raise RuntimeError(f"job {job.id}: record keeps changing")

    async def _begin(self, d: Delivery) -> bool:
        return await self._cas(d.job, "running", d.deliveries)

    async def _store(self, job: Job, reply: str) -> bool:
        if not await self._cas(job, job.status):
            return False
        if reply and self.nc is not None:
            await self.nc.publish(self.done_subject(reply), encode_result(job))
        return True

    async def _ack(self, d: Delivery) -> None:
        msg: Msg = d.handle
        await msg.ack_sync()

    async def _touch(self, ds: list[Delivery]) -> None:
        for d in ds:
            await d.handle.in_progress()

    async def destroy(self) -> None:
        """Delete this queue's stream and bucket (tests and benchmarks)."""
        await self.js.delete_stream(self.stream)
        await self.js.delete_key_value(self.bucket)
