"""The circuit breaker on virtual loop time: trips, declines instantly, probes, recovers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from rtgate.core.budget import Budget
from rtgate.core.errors import Declined
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.gate import Gate
from rtgate.resilience import BreakerConfig, BreakerTier, CircuitBreaker, resilient, tier_probe
from rtgate.resilience.breaker import Permit
from rtgate.tiers.base import Tier
from rtgate.tiers.fake import FakeTier

pytestmark = pytest.mark.looptime

CFG = BreakerConfig(min_calls=4, failure_rate=0.5, open_s=5.0, max_open_s=40.0)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def state(b: CircuitBreaker | BreakerTier) -> str:
    """The state, read through a function (mypy would narrow a repeated attribute read)."""
    return (b.breaker if isinstance(b, BreakerTier) else b).state


async def drain(tier: Tier, budget_ms: float = 10_000) -> str:
    return "".join([str(p) async for p in tier.stream(Request("hi"), Budget(budget_ms))])


def test_state_machine_on_an_injected_clock() -> None:
    clock = Clock()
    b = CircuitBreaker(CFG, clock=clock)
    for ok in (True, False, True):
        p = b.allow()
        assert p is not None
        b.record(p, "success" if ok else "failure")
    assert state(b) == "closed"  # 3 calls < min_calls
    b.record(Permit(False), "failure")  # 2 of 4 failed
    assert state(b) == "open" and b.opened == 1
    assert b.allow() is None and b.rejected == 1
    clock.t += 4.9
    assert state(b) == "open"
    clock.t += 0.2
    assert state(b) == "half_open"
    trial = b.allow()
    assert trial is not None and trial.trial
    assert b.allow() is None  # one trial at a time
    b.record(trial, "failure")
    assert state(b) == "open" and b.cooldown_s() == 10.0  # doubled
    clock.t += 10.0
    trial = b.allow()
    assert trial is not None
    b.record(trial, "success")
    assert state(b) == "closed" and b.failure_rate() == 0.0 and b.cooldown_s() == 5.0


def test_old_outcomes_leave_the_window_and_neutral_ones_never_count() -> None:
    clock = Clock()
    b = CircuitBreaker(BreakerConfig(window_s=10.0, min_calls=2, failure_rate=0.5), clock=clock)
    b.record(Permit(False), "failure")
    clock.t += 11.0
    b.record(Permit(False), "success")
    for _ in range(10):
        b.record(Permit(False), "neutral")
    assert state(b) == "closed" and b.failure_rate() == 0.0


def test_window_is_bounded() -> None:
    b = CircuitBreaker(BreakerConfig(max_samples=8, min_calls=8, failure_rate=1.0), clock=Clock())
    for _ in range(1000):
        b.record(Permit(False), "success")
    assert b.snapshot()["samples"] == 8


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError):
        BreakerConfig(failure_rate=0.0)
    with pytest.raises(ValueError):
        BreakerConfig(open_s=10.0, max_open_s=5.0)


async def test_failing_backend_trips_and_then_declines_at_once() -> None:
    inner = FakeTier("cloud", 80, ["x"], ttft_ms=50, fail_at=0)
    tier = BreakerTier(inner, CFG)
    for _ in range(4):
        with pytest.raises(RuntimeError):
            await drain(tier)
    assert state(tier.breaker) == "open"
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(Declined, match="circuit open"):
        await drain(tier)
    assert loop.time() == t0  # not a single await of the backend
    assert inner.calls == 4


async def test_declines_and_short_cutoffs_are_neutral_slow_ones_fail() -> None:
    declining = BreakerTier(FakeTier("t", 1, decline=True), CFG)
    for _ in range(10):
        with pytest.raises(Declined):
            await drain(declining)
    assert state(declining.breaker) == "closed"

    slow_cfg = BreakerConfig(min_calls=2, failure_rate=0.5, slow_ms=500)
    hanging = BreakerTier(FakeTier("h", 1, hang=True), slow_cfg)
    for _ in range(3):  # cut off after 100 ms: the budget's doing
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await drain(hanging)
    assert state(hanging.breaker) == "closed"
    for _ in range(2):  # cut off after 600 ms: a slow call
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.6):
                await drain(hanging)
    assert state(hanging.breaker) == "open"


async def test_consumer_closing_after_first_piece_is_a_success() -> None:
    tier = BreakerTier(FakeTier("c", 1, ["a", "b", "c"], tpot_ms=10), CFG)
    for _ in range(6):
        agen = tier.stream(Request("hi"), Budget(1000))
        assert await anext(agen) == "a"
        await agen.aclose()  # type: ignore[attr-defined]
    assert tier.breaker.failure_rate() == 0.0


async def test_half_open_trial_after_cooldown_recovers() -> None:
    inner = FakeTier("cloud", 80, ["ok"], fail_at=0)
    tier = BreakerTier(inner, CFG)
    for _ in range(4):
        with pytest.raises(RuntimeError):
            await drain(tier)
    inner.fail_at = None  # the backend heals
    await asyncio.sleep(5.0)
    assert state(tier.breaker) == "half_open"
    assert await drain(tier) == "ok"
    assert state(tier.breaker) == "closed"


async def test_while_open_only_the_probe_reaches_the_backend_until_it_is_healthy() -> None:
    inner = FakeTier("cloud", 80, ["ok"], fail_at=0)
    tier = BreakerTier(inner, CFG, probe=tier_probe(inner))
    for _ in range(4):
        with pytest.raises(RuntimeError):
            await drain(tier)
    assert state(tier.breaker) == "open"
    await asyncio.sleep(20.0)  # probes at 5 s and 15 s fail (cool-down doubles)
    assert state(tier.breaker) == "open"
    assert tier.probes_failed == 2 and tier.probes_ok == 0
    with pytest.raises(Declined):
        await drain(tier)  # no cool-down release: still declined
    assert inner.calls == 4 + 2  # the user calls that tripped it, then only the probes
    inner.fail_at = None
    await asyncio.sleep(20.0)  # the probe at 35 s succeeds
    assert tier.probes_ok == 1 and inner.calls == 7
    assert state(tier.breaker) == "half_open"
    assert await drain(tier) == "ok"
    assert state(tier.breaker) == "closed"
    await tier.aclose()


async def test_gate_falls_back_at_once_past_an_open_circuit() -> None:
    cloud = resilient(FakeTier("cloud", 80, ["deep"], ttft_ms=30, fail_at=0), breaker=CFG)
    local = FakeTier("local", 50, ["quick"], ttft_ms=20)
    priors = {"cloud": Prior(200, 200), "local": Prior(50, 50)}
    async with Gate([cloud, local], priors=priors) as gate:
        for _ in range(4):
            res = await gate.answer(Request("hi", delegate=False), budget_ms=500)
            assert res.route == "local"
        assert isinstance(cloud, BreakerTier) and state(cloud.breaker) == "open"
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        res = await gate.answer(Request("hi", delegate=False), budget_ms=500)
        took_ms = (loop.time() - t0) * 1000
    assert res.route == "local"
    assert res.trace.attempts[0].detail == "cloud: circuit open"
    assert took_ms == pytest.approx(20, abs=1)  # only the local tier's own time


class _Unencodable(FakeTier):
    """A backend that cannot encode the caller's text (as httpx fails on a lone surrogate)."""

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        request.input.encode("utf-8")
        yield "never"


async def test_text_a_backend_cannot_encode_is_the_callers_fault_not_a_failure() -> None:
    tier = BreakerTier(_Unencodable("cloud", 80, ["x"]), CFG)
    for _ in range(20):
        with pytest.raises(UnicodeEncodeError):
            await anext(tier.stream(Request("bad \ud800 text"), Budget(10_000)))
    assert state(tier.breaker) == "closed" and tier.breaker.failure_rate() == 0.0
