"""Delegated jobs on Redis Streams: a consumer group of workers, acknowledged last.

Keys, with ``prefix`` (default ``rtgate``; on Redis Cluster give it a hash tag such as
``rtgate:{q1}`` so one queue's keys share a slot)::

    {prefix}:jobs          stream of jobs waiting or in flight; group "workers"
    {prefix}:job:{id}      hash: status, tier, owner, reply, attempts, worker, result (JSON); TTL
    {prefix}:done:{replica} pub/sub channel: results for the replica holding the caller

Bound: a Lua script refuses a job when ``XLEN >= maxsize`` and otherwise adds it and its
record in one step. No ``MAXLEN`` trimming — it would silently drop the oldest jobs,
acknowledged or not; instead a worker deletes an entry (``XACK`` + ``XDEL``) once its
result is stored, so ``XLEN`` counts exactly the jobs not yet finished. A job id already
recorded is not added twice (a resubmission after a lost reply is harmless).

Dead workers: every ``min_idle_ms / 2`` a worker reclaims entries idle longer than
``min_idle_ms`` with ``XAUTOCLAIM``; a live worker keeps its own entries fresh by
re-claiming them (only while it still owns them). Idle time is the Redis server's clock.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from rtgate.core.errors import InvalidRequest
from rtgate.delegate.broker import BrokerQueue, Delivery
from rtgate.delegate.codec import decode_job, encode_result
from rtgate.gate.jobs import Job

__all__ = ["RedisStreamsQueue"]

GROUP = "workers"
log = logging.getLogger("rtgate.delegate")

_SUBMIT = """
if redis.call('EXISTS', KEYS[2]) == 1 then return {1, redis.call('XLEN', KEYS[1])} end
local n = redis.call('XLEN', KEYS[1])
if n >= tonumber(ARGV[1]) then return {0, n} end
redis.call('XADD', KEYS[1], '*', 'job', ARGV[2])
redis.call('HSET', KEYS[2], 'id', ARGV[4], 'tier', ARGV[5], 'status', 'queued',
           'created', ARGV[6], 'reply', ARGV[7], 'attempts', 0, 'owner', ARGV[8])
redis.call('EXPIRE', KEYS[2], ARGV[3])
return {1, n + 1}
"""

_BEGIN = """
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'done' or st == 'failed' or st == 'cancelled' then return -1 end
local n = redis.call('HINCRBY', KEYS[1], 'attempts', 1)
redis.call('HSET', KEYS[1], 'status', 'running', 'worker', ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
return n
"""

_FINISH = """
local st = redis.call('HGET', KEYS[1], 'status')
if st == 'done' or st == 'failed' or st == 'cancelled' then return 0 end
redis.call('HSET', KEYS[1], 'status', ARGV[4], 'result', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[1])
if ARGV[2] ~= '' then redis.call('PUBLISH', ARGV[2], ARGV[3]) end
return 1
"""

_ACK = """
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
"""

# Re-claim (resetting idle time) only the entries this consumer still owns.
_TOUCH = """
local n = 0
for i = 3, #ARGV do
  local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[i], ARGV[i], 1)
  if p[1] and p[1][2] == ARGV[2] then
    redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[i], 'JUSTID')
    n = n + 1
  end
end
return n
"""


_Arg = str | bytes | int | float


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class RedisStreamsQueue(BrokerQueue):
    """A :class:`~rtgate.delegate.broker.BrokerQueue` on Redis Streams.

    Args:
        url: ``redis://host:port/db`` (or pass ``client``).
        prefix: key prefix, see the module docstring.
        result_ttl_s: how long a job's record and result stay readable.
        min_idle_ms: a job unacknowledged this long belongs to a dead worker.
        block_ms: how long a worker's ``XREADGROUP`` waits for a job.
        Other arguments: see :class:`BrokerQueue`.
    """

    broker = "redis"

    def __init__(
        self,
        url: str = "redis://127.0.0.1:6379/0",
        *,
        client: aioredis.Redis | None = None,
        prefix: str = "rtgate",
        result_ttl_s: int = 86_400,
        min_idle_ms: int = 30_000,
        block_ms: int = 1_000,
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        self.url = url
        self.prefix = prefix
        self.result_ttl_s = int(result_ttl_s)
        self.min_idle_ms = int(min_idle_ms)
        self.block_ms = int(block_ms)
        self.touch_every_s = max(0.05, self.min_idle_ms / 3000.0)
        self.stream = f"{prefix}:jobs"
        self._own_client = client is None
        self.redis: aioredis.Redis = client or aioredis.Redis.from_url(url, decode_responses=True)
        self._submit = self.redis.register_script(_SUBMIT)
        self._begin_s = self.redis.register_script(_BEGIN)
        self._finish = self.redis.register_script(_FINISH)
        self._ack_s = self.redis.register_script(_ACK)
        self._touch_s = self.redis.register_script(_TOUCH)
        self._last_reclaim = 0.0
        self._claim_cursor = "0-0"

    def key(self, job_id: str) -> str:
        return f"{self.prefix}:job:{job_id}"

    def channel(self, replica: str) -> str:
        return f"{self.prefix}:done:{replica}"

    async def _connect(self) -> None:
        try:
            await self.redis.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    async def _disconnect(self) -> None:
        if self._own_client:
            await self.redis.aclose()

    async def _enqueue(self, batch: list[tuple[Job, bytes]]) -> list[bool]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for job, payload in batch:
                args: list[_Arg] = [self.maxsize, payload, self.result_ttl_s, job.id, job.tier]
                args += [job.created, self.replica, job.owner or ""]
                await self._submit(keys=[self.stream, self.key(job.id)], args=args, client=pipe)
            replies = await pipe.execute()
        self._depth = int(replies[-1][1]) if replies else self._depth
        return [bool(int(r[0])) for r in replies]

    async def _notifications(self) -> AsyncIterator[bytes]:
        pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(self.channel(self.replica))
            await self._reconcile()  # anything finished before the subscription took hold
            # redis-py may swallow a cancellation while it waits here: check the flag too
            while not self._stopping:
                msg = await pubsub.get_message(timeout=0.25)
                if msg is not None and msg.get("type") == "message":
                    data = msg["data"]
                    yield data if isinstance(data, bytes) else str(data).encode()
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]

    async def _lookup_many(self, ids: list[str]) -> list[dict[str, Any] | None]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for job_id in ids:
                await pipe.hgetall(self.key(job_id))
            rows = await pipe.execute()
        out: list[dict[str, Any] | None] = []
        for job_id, row in zip(ids, rows, strict=True):
            h = {_s(k): _s(v) for k, v in row.items()}
            if not h:
                out.append(None)
                continue
            rec = json.loads(h["result"]) if "result" in h else {"id": job_id}
            rec.setdefault("tier", h.get("tier", ""))
            if h.get("owner"):
                rec["owner"] = h["owner"]
            if h.get("created"):
                rec.setdefault("created", float(h["created"]))
            rec["status"] = h.get("status")
            rec["attempts"] = int(h.get("attempts") or 0)
            out.append(rec)
        return out

    async def _fetch(self, n: int) -> list[Delivery]:
        now = time.monotonic()
        if now - self._last_reclaim >= self.min_idle_ms / 2000.0:
            self._last_reclaim = now
            claimed = await self.reclaim(n)
            if claimed:
                return claimed
        res: Any = await self.redis.xreadgroup(
            GROUP, self.replica, {self.stream: ">"}, count=n, block=self.block_ms
        )
        out: list[Delivery] = []
        for item in res or []:
            out += await self._decode(item[1])
        return out

    async def reclaim(self, n: int, min_idle_ms: int | None = None) -> list[Delivery]:
        """Take over up to ``n`` jobs idle longer than ``min_idle_ms`` (a dead worker's)."""
        idle = self.min_idle_ms if min_idle_ms is None else min_idle_ms
        res = await self.redis.xautoclaim(
            self.stream, GROUP, self.replica, idle, self._claim_cursor, count=n
        )
        self._claim_cursor = _s(res[0])
        for gone in res[2] if len(res) > 2 else []:  # deleted while pending: drop them
            await self.redis.xack(self.stream, GROUP, gone)
        await self._forget_dead_consumers()
        return await self._decode(res[1])

    async def _forget_dead_consumers(self) -> None:
        """Remove consumers (dead workers) with nothing pending and long idle."""
        limit = max(60_000, 10 * self.min_idle_ms)
        for c in await self.redis.xinfo_consumers(self.stream, GROUP):
            name = _s(c["name"])
            if name != self.replica and int(c["pending"]) == 0 and int(c["idle"]) > limit:
                await self.redis.xgroup_delconsumer(self.stream, GROUP, name)

    async def _decode(self, entries: list[Any]) -> list[Delivery]:
        out = []
        for entry_id, fields in entries:
            if not fields:
                continue
            try:
                job, reply = decode_job(fields.get("job") or fields.get(b"job") or b"")
            except InvalidRequest as e:  # a poison message: drop it rather than loop on it
                log.warning("redis: dropping malformed job %s: %s", _s(entry_id), e)
                await self._ack(Delivery(Job("?", "?", None, 0.0), "", _s(entry_id)))
                self.stats["gave_up"] += 1
                continue
            out.append(Delivery(job, reply, _s(entry_id)))
        return out

    async def _begin(self, d: Delivery) -> bool:
        args: list[_Arg] = [self.replica, self.result_ttl_s]
        n = int(await self._begin_s(keys=[self.key(d.job.id)], args=args))
        if n < 0:
            return False
        d.deliveries = n
        return True

    async def _store(self, job: Job, reply: str) -> bool:
        result = encode_result(job)
        channel = self.channel(reply) if reply else ""
        args: list[_Arg] = [self.result_ttl_s, channel, result, job.status]
        return bool(int(await self._finish(keys=[self.key(job.id)], args=args)))

    async def _ack(self, d: Delivery) -> None:
        await self._ack_s(keys=[self.stream], args=[GROUP, d.handle])

    async def _touch(self, ds: list[Delivery]) -> None:
        args = [GROUP, self.replica, *[d.handle for d in ds]]
        await self._touch_s(keys=[self.stream], args=args)

    async def pending(self) -> int:
        """Entries handed to some worker and not yet acknowledged."""
        info = await self.redis.xpending(self.stream, GROUP)
        return int(info["pending"] if isinstance(info, dict) else info[0])

    async def destroy(self) -> None:
        """Delete this queue's stream (tests and benchmarks; job records expire)."""
        await self.redis.delete(self.stream)
