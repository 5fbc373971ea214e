"""Admission control on virtual time: past capacity the gate degrades at once."""

from __future__ import annotations

import asyncio

import pytest

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.latency import Prior
from rtgate.core.request import Request
from rtgate.gate import Gate
from rtgate.resilience import AdmissionTier, ConcurrencyLimiter
from rtgate.tiers.fake import FakeTier

pytestmark = pytest.mark.looptime


def test_limiter_counts_and_refuses_bad_capacity() -> None:
    lim = ConcurrencyLimiter(2)
    assert lim.try_acquire() and lim.try_acquire()
    assert not lim.try_acquire()
    lim.release()
    assert lim.try_acquire()
    assert lim.snapshot() == {
        "capacity": 2,
        "in_flight": 2,
        "peak": 2,
        "admitted": 3,
        "shed": 1,
        "shed_rate": 0.25,
    }
    with pytest.raises(ValueError):
        ConcurrencyLimiter(0)
    lim.release()
    lim.release()
    with pytest.raises(RuntimeError):
        lim.release()


async def test_over_capacity_is_declined_without_waiting() -> None:
    inner = FakeTier("local", 50, ["a", "b"], ttft_ms=100, tpot_ms=100)
    tier = AdmissionTier(inner, 2)
    first = [tier.stream(Request("x"), Budget(1000)) for _ in range(2)]
    holders = [asyncio.ensure_future(anext(a)) for a in first]
    await asyncio.sleep(0.01)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(Declined, match="at capacity"):
        await anext(tier.stream(Request("x"), Budget(1000)))
    assert loop.time() == t0
    assert await asyncio.gather(*holders) == ["a", "a"]
    for a in first:
        await a.aclose()  # type: ignore[attr-defined]
    assert tier.limiter.in_flight == 0  # closing frees the slot
    assert [p async for p in tier.stream(Request("x"), Budget(1000))] == ["a", "b"]
    assert tier.snapshot()["shed"] == 1 and tier.snapshot()["peak"] == 2


async def test_slot_is_freed_when_the_inner_tier_fails_or_is_cancelled() -> None:
    tier = AdmissionTier(FakeTier("f", 1, fail_at=0), 1)
    with pytest.raises(RuntimeError):
        await anext(tier.stream(Request("x"), Budget(1000)))
    hang = AdmissionTier(FakeTier("h", 1, hang=True), 1)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await anext(hang.stream(Request("x"), Budget(1000)))
    assert tier.limiter.in_flight == 0 and hang.limiter.in_flight == 0


async def test_shared_limiter_caps_two_tiers_on_one_backend() -> None:
    shared = ConcurrencyLimiter(1, "llama")
    a = AdmissionTier(FakeTier("local", 50, ["l"], ttft_ms=50), shared)
    b = AdmissionTier(FakeTier("cloud", 80, ["c"], ttft_ms=50), shared)
    held = a.stream(Request("x"), Budget(1000))
    task = asyncio.ensure_future(anext(held))
    await asyncio.sleep(0)
    with pytest.raises(Declined):
        await anext(b.stream(Request("x"), Budget(1000)))
    assert await task == "l"
    await held.aclose()  # type: ignore[attr-defined]


async def test_overload_degrades_to_the_template_in_budget() -> None:
    """20 concurrent requests on a local tier of capacity 2: 2 answered by it, the rest by
    the template at once, and every answer within budget."""
    local = AdmissionTier(FakeTier("local", 50, ["quick"], ttft_ms=80), 2)
    template = FakeTier("template", 10, ["canned"], ttft_ms=1)
    priors = {"local": Prior(110, 110), "template": Prior(4, 4)}
    async with Gate([local, template], priors=priors) as gate:
        loop = asyncio.get_running_loop()
        t0 = loop.time()

        async def one() -> tuple[str, float]:
            res = await gate.answer(Request("hi", delegate=False), budget_ms=150)
            return res.route, (loop.time() - t0) * 1000

        results = await asyncio.gather(*(one() for _ in range(20)))
    routes = [r for r, _ in results]
    assert routes.count("local") == 2 and routes.count("template") == 18
    assert max(t for _, t in results) <= 150
    shed_times = [t for r, t in results if r == "template"]
    assert max(shed_times) <= 2  # shed and answered by the template right away
    assert local.limiter.peak == 2
