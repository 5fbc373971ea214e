"""Learned latency shared through Redis, so a new gate replica starts warm.

Each :class:`~rtgate.core.latency.LatencyModel` is summarised as ``points`` quantiles of its
first-piece and whole-answer windows plus their sample counts (``{prefix}:latency``, one
hash field per tier, JSON). A replica that starts loads the summary and replays it into
its fresh model — as many samples as the window holds — so its p50/p99 match the fleet's
within the sketch's 1 % accuracy and then move with its own observations. Replicas and
workers save every ``every_s``; the last writer of a tier wins (it had loaded the others'
view when it started). Only public ``LatencyModel`` methods are used.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis

from rtgate.core.latency import LatencyModel, WindowedQuantiles

__all__ = ["SharedLatency", "replay", "summarise"]

log = logging.getLogger("rtgate.delegate")


def summarise(w: WindowedQuantiles, points: int = 101) -> dict[str, Any]:
    """``points`` evenly spaced quantiles (min … max) of a window, and its count."""
    n = w.count
    if n == 0:
        return {"n": 0, "q": []}
    qs = [i / (points - 1) for i in range(points)]
    return {"n": n, "q": [round(w.quantile(q), 4) for q in qs]}


def replay(w: WindowedQuantiles, summary: Mapping[str, Any]) -> int:
    """Add samples drawn evenly from a summary's quantiles; returns how many."""
    qv = [float(x) for x in summary.get("q") or []]
    n = min(int(summary.get("n") or 0), w.window)
    if not qv or n <= 0:
        return 0
    last = len(qv) - 1
    for j in range(n):
        # rank (j + 0.5) / n, read off the quantile curve at the nearest point; the
        # largest sample is the summary's maximum so a p99 by upper rank is preserved
        w.add(qv[last] if j == n - 1 else qv[min(last, round((j + 0.5) / n * last))])
    w.refresh()
    return n


class SharedLatency:
    """Save and load the gate's learned latency models in Redis.

    Args:
        redis: a client, or a URL.
        prefix: key prefix (the same for every replica of a deployment).
        ttl_s: the summaries expire if nobody saves them for this long.
    """

    def __init__(
        self,
        redis: aioredis.Redis | str = "redis://127.0.0.1:6379/0",
        *,
        prefix: str = "rtgate",
        ttl_s: int = 7 * 86_400,
        replica: str = "",
    ) -> None:
        self._own = isinstance(redis, str)
        if isinstance(redis, str):
            redis = aioredis.Redis.from_url(redis, decode_responses=True)
        self.redis: aioredis.Redis = redis
        self.key = f"{prefix}:latency"
        self.ttl_s = ttl_s
        self.replica = replica

    async def save(self, models: Mapping[str, LatencyModel]) -> int:
        """Store a summary of every model that has samples; returns how many."""
        fields: dict[Any, Any] = {}
        for name, m in models.items():
            if m.ttft.count == 0:
                continue
            fields[name] = json.dumps(
                {
                    "ttft": summarise(m.ttft),
                    "total": summarise(m.total),
                    "by": self.replica,
                    "at": time.time(),
                },
                separators=(",", ":"),
            )
        if fields:
            async with self.redis.pipeline(transaction=True) as pipe:
                await pipe.hset(self.key, mapping=fields)
                await pipe.expire(self.key, self.ttl_s)
                await pipe.execute()
        return len(fields)

    async def load(self, models: Mapping[str, LatencyModel]) -> dict[str, int]:
        """Warm the *empty* models named in Redis; returns samples replayed per tier.
        A model that has already observed its tier keeps its own view."""
        names = [n for n, m in models.items() if m.ttft.count == 0]
        if not names:
            return {}
        raw = await self.redis.hmget(self.key, names)
        out: dict[str, int] = {}
        for name, text in zip(names, raw, strict=True):
            if not text:
                continue
            try:
                d = json.loads(text)
                m = models[name]
                out[name] = replay(m.ttft, d["ttft"])
                replay(m.total, d["total"])
            except (ValueError, KeyError, TypeError) as e:
                log.warning("shared latency for %s is unreadable (%s); starting cold", name, e)
        return out

    async def run(self, models: Mapping[str, LatencyModel], every_s: float = 10.0) -> None:
        """Save every ``every_s`` until cancelled (then once more)."""
        try:
            while True:
                await asyncio.sleep(every_s)
                try:
                    await self.save(models)
                except Exception as e:
                    log.warning("cannot save shared latency: %s", e)
        finally:
            try:
                await self.save(models)
            except Exception as e:
                log.debug("final latency save failed: %s", e)

    async def aclose(self) -> None:
        if self._own:
            await self.redis.aclose()
