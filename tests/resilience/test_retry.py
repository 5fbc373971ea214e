"""Budget-aware retries on virtual time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from rtgate.core.budget import Budget
from rtgate.core.errors import BackendProtocolError, BackendUnavailable, Declined, RateLimited
from rtgate.core.latency import Prior
from rtgate.core.request import Piece, Request
from rtgate.resilience import BreakerConfig, BreakerTier, RetryTier
from rtgate.tiers.base import Tier

pytestmark = pytest.mark.looptime

P60 = Prior(60, 60)


class Flaky(Tier):
    """Fails its first ``failures`` calls with ``error`` after ``fail_ms``; then answers
    after ``ttft_ms``. Optionally fails after the first piece instead."""

    def __init__(
        self,
        failures: int,
        error: Exception,
        *,
        fail_ms: float = 5,
        ttft_ms: float = 40,
        mid_stream: bool = False,
        prior: Prior | None = P60,
    ) -> None:
        self.name, self.quality = "cloud", 80
        self.failures = failures
        self.error = error
        self.fail_ms, self.ttft_ms = fail_ms, ttft_ms
        self.mid_stream = mid_stream
        self.latency_prior = prior
        self.calls = 0

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        self.calls += 1
        if self.calls <= self.failures and not self.mid_stream:
            await asyncio.sleep(self.fail_ms / 1000)
            raise self.error
        await asyncio.sleep(self.ttft_ms / 1000)
        yield "a"
        if self.calls <= self.failures:
            raise self.error
        yield "b"


async def collect(tier: Tier, budget_ms: float) -> str:
    return "".join([str(p) async for p in tier.stream(Request("x"), Budget(budget_ms))])


async def test_retries_a_5xx_when_the_budget_covers_the_p99() -> None:
    inner = Flaky(1, BackendUnavailable("HTTP 500"))
    tier = RetryTier(inner, attempts=3)
    assert tier.latency_prior == Prior(60, 60) and tier.predicted_ms() == 60
    assert await collect(tier, 200) == "ab"
    assert inner.calls == 2 and tier.retried == 1 and tier.recovered == 1


async def test_no_retry_when_what_is_left_is_below_the_p99() -> None:
    inner = Flaky(1, BackendUnavailable("reset"), fail_ms=50)
    tier = RetryTier(inner, attempts=3)
    with pytest.raises(BackendUnavailable):
        await collect(tier, 100)  # 50 ms left after the failure < 60 ms p99
    assert inner.calls == 1 and tier.gave_up == 1


async def test_prediction_is_learned_from_successful_attempts() -> None:
    inner = Flaky(0, BackendUnavailable("x"), ttft_ms=150, prior=None)
    tier = RetryTier(inner)
    assert tier.predicted_ms() == float("inf")  # cold: never retried
    await collect(tier, 1000)
    assert tier.predicted_ms() == pytest.approx(150, rel=0.02)
    tier2 = RetryTier(inner, predict=lambda: 7.0)
    assert tier2.predicted_ms() == 7.0


async def test_attempts_are_bounded_and_backoff_counts_against_the_budget() -> None:
    inner = Flaky(10, BackendProtocolError("malformed"))
    tier = RetryTier(inner, attempts=3, backoff_ms=20)
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with pytest.raises(BackendProtocolError):
        await collect(tier, 10_000)
    assert inner.calls == 3 and tier.retried == 2
    assert (loop.time() - t0) * 1000 <= 3 * 5 + 20 + 40 + 1  # failures + jittered waits


@pytest.mark.parametrize(
    "error", [RateLimited("429"), RuntimeError("bug"), asyncio.CancelledError()]
)
async def test_non_retryable_errors_pass_through(error: BaseException) -> None:
    inner = Flaky(1, error)  # type: ignore[arg-type]
    tier = RetryTier(inner, attempts=3)
    with pytest.raises(type(error)):
        await collect(tier, 1000)
    assert inner.calls == 1


async def test_failure_after_the_first_piece_is_never_retried() -> None:
    inner = Flaky(1, BackendUnavailable("reset mid-stream"), mid_stream=True)
    tier = RetryTier(inner, attempts=3)
    seen: list[str] = []
    with pytest.raises(BackendUnavailable):
        async for p in tier.stream(Request("x"), Budget(1000)):
            seen.append(str(p))
    assert seen == ["a"] and inner.calls == 1


async def test_open_circuit_stops_retries() -> None:
    inner = Flaky(100, BackendUnavailable("down"), fail_ms=1)
    breaker = BreakerTier(inner, BreakerConfig(min_calls=2, failure_rate=0.5))
    tier = RetryTier(breaker, attempts=5)
    with pytest.raises(Declined, match="circuit open"):
        await collect(tier, 1000)  # attempt 2 trips the breaker, attempt 3 is declined
    assert breaker.breaker.state == "open" and inner.calls == 2
    with pytest.raises(Declined, match="circuit open"):
        await collect(tier, 1000)  # and a Declined is never retried
    assert inner.calls == 2 and tier.retried == 2
