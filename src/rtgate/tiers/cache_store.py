"""Where cached answers live: a small async interface and an in-process store.

:class:`CacheStore` has three operations, all async so a networked store (Redis,
issue 8) can implement them: ``get`` by exact key, ``put`` an entry (with an optional
embedding), and ``nearest`` entries to a vector by cosine similarity.

:class:`InMemoryStore` is bounded: ``max_entries`` entries, least recently used evicted
first when full (a ``get`` counts as a use); each entry expires ``ttl_s`` after it was put.
Vectors live in one preallocated float32 matrix, so ``nearest`` is one matrix-vector
product (~0.1 ms for 4096 entries). It belongs to one event loop and is not thread-safe.
"""

from __future__ import annotations

import math
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.core.errors import InvalidRequest

__all__ = ["CacheEntry", "CacheStore", "InMemoryStore"]

Vector = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """One cached answer.

    Attributes:
        key: the normalised query (exact-match key).
        query: the query as it was asked (the semantic guard reads it).
        payload: the answer, ``{"text": str, "data": {...}}``.
        vector: the query's embedding, for semantic lookups (optional).
    """

    key: str
    query: str
    payload: Mapping[str, Any]
    vector: Vector | None = None


class CacheStore(ABC):
    """Storage for :class:`CacheEntry` objects."""

    @abstractmethod
    async def get(self, key: str) -> CacheEntry | None:
        """The live entry for ``key``, or ``None``."""

    @abstractmethod
    async def put(self, entry: CacheEntry) -> None:
        """Insert or replace the entry for ``entry.key``."""

    @abstractmethod
    async def nearest(self, vector: Vector, k: int = 4) -> list[tuple[float, CacheEntry]]:
        """Up to ``k`` live entries with vectors, most similar first, as (cosine, entry)."""

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


class InMemoryStore(CacheStore):
    """A bounded LRU + TTL store in this process (policy when full: evict the LRU entry)."""

    def __init__(
        self,
        *,
        max_entries: int = 4096,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        if not ttl_s > 0:
            raise ValueError("ttl_s must be > 0")
        self.max_entries = max_entries
        self.ttl_s = ttl_s
        self.clock = clock
        self._items: OrderedDict[str, tuple[CacheEntry, float, int]] = OrderedDict()
        self._matrix: npt.NDArray[np.float32] | None = None
        self._slot_key: list[str | None] = [None] * max_entries
        self._used = np.zeros(max_entries, dtype=bool)
        self._free = list(range(max_entries - 1, -1, -1))
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._items)

    async def get(self, key: str) -> CacheEntry | None:
        return self.get_now(key)

    def get_now(self, key: str) -> CacheEntry | None:
        """:meth:`get` without awaiting (the store is in memory)."""
        item = self._items.get(key)
        if item is None:
            return None
        entry, expires, _slot = item
        if self.clock() >= expires:
            self._drop(key)
            return None
        self._items.move_to_end(key)
        return entry

    async def put(self, entry: CacheEntry) -> None:
        v = None if entry.vector is None else self._check(entry.vector, create=True)
        if entry.key in self._items:
            self._drop(entry.key)
        while len(self._items) >= self.max_entries:
            self._drop(next(iter(self._items)))
            self.evictions += 1
        slot = -1
        if v is not None and self._matrix is not None:
            slot = self._free.pop()
            self._matrix[slot] = v
            self._slot_key[slot] = entry.key
            self._used[slot] = True
        self._items[entry.key] = (entry, self.clock() + self.ttl_s, slot)

    def _check(self, vector: Vector, *, create: bool = False) -> Vector:
        v = np.asarray(vector, dtype=np.float32).reshape(-1)
        if self._matrix is None and create:
            self._matrix = np.zeros((self.max_entries, v.shape[0]), dtype=np.float32)
        dim = v.shape[0] if self._matrix is None else self._matrix.shape[1]
        if v.shape[0] != dim:
            raise InvalidRequest(f"vector has {v.shape[0]} dims, the store holds {dim}")
        if not math.isfinite(float(v @ v)):
            raise InvalidRequest("vector has non-finite values")
        return v

    async def nearest(self, vector: Vector, k: int = 4) -> list[tuple[float, CacheEntry]]:
        if self._matrix is None or k < 1:
            return []
        sims = self._matrix @ self._check(vector)
        sims[~self._used] = -np.inf
        top = min(int(self._used.sum()), k)
        if top == 0:
            return []
        order = np.argpartition(-sims, top - 1)[:top]
        out: list[tuple[float, CacheEntry]] = []
        now = self.clock()
        for slot in sorted(order.tolist(), key=lambda s: -sims[s]):
            key = self._slot_key[slot]
            if key is None:
                continue
            entry, expires, _ = self._items[key]
            if now >= expires:
                self._drop(key)
                continue
            out.append((float(sims[slot]), entry))
        return out

    def _drop(self, key: str) -> None:
        _entry, _expires, slot = self._items.pop(key)
        if slot >= 0:
            self._slot_key[slot] = None
            self._used[slot] = False
            self._free.append(slot)
