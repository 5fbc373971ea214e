"""A :class:`~rtgate.tiers.cache_store.CacheStore` shared by every replica through Redis.

Keys, with ``prefix`` (on Redis Cluster give it a hash tag, e.g. ``rtgate:{cache}``: the
put script touches several keys)::

    {prefix}:cache:e:{id}   hash: key, query, payload (JSON), vector (float32 bytes); TTL
    {prefix}:cache:idx      sorted set id -> last use (ms): the LRU order and the bound
    {prefix}:cache:vec      hash id -> vector bytes: every live vector, for a full resync
    {prefix}:cache:log      stream of puts and evictions (trimmed), each with a sequence

``id`` is the SHA-1 of the normalised key. **Nearest-neighbour search is brute force**,
not RediSearch (this Redis has no modules): each store keeps a local float32 matrix of
the shared vectors, brought up to date from the log before each search (one round trip;
a gap in the sequence triggers a full reload of ``vec``), then one matrix-vector product
ranks them. The candidates' entries are then read from Redis, so an expired or evicted
entry is never returned.

Bound and policy when full: ``max_entries``; a put evicts the least recently used entries
(a ``get`` counts as a use), in the same script. Each entry expires ``ttl_s`` after it was
put (Redis ``PEXPIRE``).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import redis.asyncio as aioredis

from rtgate.core.errors import InvalidRequest
from rtgate.tiers.cache_store import CacheEntry, CacheStore

__all__ = ["RedisCacheStore"]

Vector = npt.NDArray[np.float32]

_PUT = """
redis.call('HSET', KEYS[1], 'key', ARGV[2], 'query', ARGV[3], 'payload', ARGV[4])
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'vector', ARGV[5])
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[5])
else
  redis.call('HDEL', KEYS[1], 'vector')
  redis.call('HDEL', KEYS[3], ARGV[1])
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('ZADD', KEYS[2], ARGV[7], ARGV[1])
local seq = redis.call('INCR', KEYS[5])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[9], '*', 'seq', seq, 'op', 'put',
           'id', ARGV[1], 'v', ARGV[5])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[8])
local evicted = 0
while over > 0 do
  local old = redis.call('ZPOPMIN', KEYS[2])
  redis.call('DEL', ARGV[10] .. old[1])
  redis.call('HDEL', KEYS[3], old[1])
  seq = redis.call('INCR', KEYS[5])
  redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[9], '*', 'seq', seq, 'op', 'del',
             'id', old[1], 'v', '')
  over = over - 1
  evicted = evicted + 1
end
return evicted
"""

# An entry found expired: forget its vector everywhere (unless it was put again).
_FORGET = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[3], ARGV[1])
local seq = redis.call('INCR', KEYS[5])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[2], '*', 'seq', seq, 'op', 'del',
           'id', ARGV[1], 'v', '')
return 1
"""


def _id(key: str) -> str:
    return hashlib.sha1(key.encode()).hexdigest()


def _b(v: Any) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode()


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class _Index:
    """The local mirror of the shared vectors: a growing float32 matrix, unit rows."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.row: dict[str, int] = {}
        self.matrix: npt.NDArray[np.float32] | None = None

    def clear(self) -> None:
        self.ids.clear()
        self.row.clear()
        self.matrix = None

    def put(self, id_: str, v: Vector) -> None:
        norm = float(np.linalg.norm(v))
        unit = v / norm if norm > 0 else v
        if self.matrix is None:
            self.matrix = np.zeros((64, v.shape[0]), dtype=np.float32)
        if v.shape[0] != self.matrix.shape[1]:
            return  # a vector of another model: not comparable, not indexed
        i = self.row.get(id_)
        if i is None:
            i = len(self.ids)
            if i == self.matrix.shape[0]:
                self.matrix = np.vstack([self.matrix, np.zeros_like(self.matrix)])
            self.ids.append(id_)
            self.row[id_] = i
        self.matrix[i] = unit

    def drop(self, id_: str) -> None:
        i = self.row.pop(id_, None)
        if i is None or self.matrix is None:
            return
        last = len(self.ids) - 1
        if i != last:  # move the last row into the hole
            moved = self.ids[last]
            self.ids[i] = moved
            self.row[moved] = i
            self.matrix[i] = self.matrix[last]
        self.ids.pop()

    def top(self, v: Vector, k: int) -> list[tuple[float, str]]:
        n = len(self.ids)
        if self.matrix is None or n == 0 or v.shape[0] != self.matrix.shape[1]:
            return []
        norm = float(np.linalg.norm(v))
        sims = self.matrix[:n] @ (v / norm if norm > 0 else v)
        k = min(k, n)
        order = np.argpartition(-sims, k - 1)[:k]
        return sorted(((float(sims[i]), self.ids[i]) for i in order), reverse=True)


class RedisCacheStore(CacheStore):
    """Cached answers in Redis, shared by the replicas (see the module docstring).

    Args:
        redis: a URL, or a client made with ``decode_responses=False``.
        prefix: key prefix; one per cache (an exact and a semantic cache use two).
        max_entries: the bound; the least recently used entries go first.
        ttl_s: an entry's lifetime after its put.
    """

    def __init__(
        self,
        redis: aioredis.Redis | str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "rtgate",
        max_entries: int = 4096,
        ttl_s: float = 3600.0,
    ) -> None:
        if max_entries < 1 or not ttl_s > 0:
            raise ValueError("max_entries must be >= 1 and ttl_s > 0")
        self._own = isinstance(redis, str)
        if isinstance(redis, str):
            redis = aioredis.Redis.from_url(redis)
        elif redis.connection_pool.connection_kwargs.get("decode_responses"):
            raise ValueError("RedisCacheStore needs decode_responses=False: vectors are bytes")
        self.redis: aioredis.Redis = redis
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        base = f"{prefix}:cache"
        self.entry_prefix = f"{base}:e:"
        self.idx, self.vec = f"{base}:idx", f"{base}:vec"
        self.log, self.seq = f"{base}:log", f"{base}:seq"
        self._put = self.redis.register_script(_PUT)
        self._forget = self.redis.register_script(_FORGET)
        self._index = _Index()
        self._last_id = "0-0"
        self._last_seq: int | None = None
        self.resyncs = 0

    def _keys(self, id_: str) -> list[str]:
        return [self.entry_prefix + id_, self.idx, self.vec, self.log, self.seq]

    @staticmethod
    def _vector(vector: Vector) -> Vector:
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
        if v.size == 0 or not math.isfinite(float(v @ v)):
            raise InvalidRequest("a cache vector must be non-empty and finite")
        return v

    async def put(self, entry: CacheEntry) -> None:
        v = None if entry.vector is None else self._vector(entry.vector)
        m = self._index.matrix
        if v is not None and m is not None and v.shape[0] != m.shape[1]:
            raise InvalidRequest(f"vector has {v.shape[0]} dims, the store holds {m.shape[1]}")
        id_ = _id(entry.key)
        payload = json.dumps(dict(entry.payload), ensure_ascii=False, separators=(",", ":"))
        args: list[str | bytes | int] = [id_, entry.key, entry.query, payload]
        args += [b"" if v is None else v.tobytes(), int(self.ttl_s * 1000)]
        args += [int(time.time() * 1000), self.max_entries, 2 * self.max_entries]
        args += [self.entry_prefix]
        await self._put(keys=self._keys(id_), args=args)

    async def get(self, key: str) -> CacheEntry | None:
        id_ = _id(key)
        async with self.redis.pipeline(transaction=False) as pipe:
            await pipe.hgetall(self.entry_prefix + id_)
            await pipe.zadd(self.idx, {id_: int(time.time() * 1000)}, xx=True)  # a use
            row, _ = await pipe.execute()
        return self._entry(row)

    def _entry(self, row: dict[Any, Any]) -> CacheEntry | None:
        h = {_s(k): v for k, v in row.items()}
        if "key" not in h:
            return None
        raw = h.get("vector")
        vector = np.frombuffer(_b(raw), dtype=np.float32).copy() if raw else None
        return CacheEntry(_s(h["key"]), _s(h["query"]), json.loads(_s(h["payload"])), vector)

    async def nearest(self, vector: Vector, k: int = 4) -> list[tuple[float, CacheEntry]]:
        if k < 1:
            return []
        await self.sync()
        found = self._index.top(self._vector(vector), 2 * k)  # spares for expired ones
        if not found:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for _, id_ in found:
                await pipe.hgetall(self.entry_prefix + id_)
            rows = await pipe.execute()
        out: list[tuple[float, CacheEntry]] = []
        for (sim, id_), row in zip(found, rows, strict=True):
            entry = self._entry(row)
            if entry is None:  # expired: forget it here and for everyone
                self._index.drop(id_)
                await self._forget(keys=self._keys(id_), args=[id_, 2 * self.max_entries])
            elif len(out) < k:
                out.append((sim, entry))
        return out

    async def sync(self) -> None:
        """Bring the local vectors up to date with the shared log (or reload them all)."""
        if self._last_seq is None:
            await self._reload()
            return
        rows: Any = await self.redis.xrange(self.log, f"({self._last_id}", "+")
        if not rows:
            return
        first = int(_s({_s(k): v for k, v in rows[0][1].items()}["seq"]))
        if first != self._last_seq + 1:  # the log was trimmed past us: start over
            await self._reload()
            return
        for entry_id, fields in rows:
            self._apply({_s(k): v for k, v in fields.items()})
            self._last_id = _s(entry_id)

    def _apply(self, f: dict[str, Any]) -> None:
        self._last_seq = int(_s(f["seq"]))
        id_ = _s(f["id"])
        v = _b(f.get("v") or b"")
        if _s(f["op"]) == "put" and v:
            self._index.put(id_, np.frombuffer(v, dtype=np.float32))
        else:
            self._index.drop(id_)

    async def _reload(self) -> None:
        self.resyncs += 1
        last: Any = await self.redis.xrevrange(self.log, "+", "-", count=1)
        vectors: Any = await self.redis.hgetall(self.vec)
        self._index.clear()
        for id_, raw in vectors.items():
            self._index.put(_s(id_), np.frombuffer(_b(raw), dtype=np.float32))
        if last:
            self._last_id = _s(last[0][0])
            self._last_seq = int(_s({_s(k): v for k, v in last[0][1].items()}["seq"]))
        else:
            self._last_id, self._last_seq = "0-0", 0

    async def clear(self) -> None:
        """Delete every entry of this cache (tests, or a deliberate flush)."""
        ids: Any = await self.redis.zrange(self.idx, 0, -1)
        keys = [self.entry_prefix + _s(i) for i in ids] + [self.idx, self.vec, self.log, self.seq]
        await self.redis.delete(*keys)
        self._index.clear()
        self._last_id, self._last_seq = "0-0", None

    async def aclose(self) -> None:
        if self._own:
            await self.redis.aclose()
