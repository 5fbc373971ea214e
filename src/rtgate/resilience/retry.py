"""Retries that only happen when the budget can afford them.

:class:`RetryTier` retries a call that failed **before its first piece** with a retryable
error (by default ``BackendUnavailable``: 5xx, refused or reset connection; and
``BackendProtocolError``: a malformed stream) — but only if what is left of the budget
covers the backoff plus the tier's predicted p99 time to first piece. A failure after the
first piece is never retried (the caller has already seen tokens), nor is a 429 (retrying
a rate limit within a sub-second budget only deepens the overload), nor a ``Declined``.

Where the prediction comes from (a decision): by default the wrapper keeps its **own**
:class:`~rtgate.core.latency.LatencyModel` of single *successful attempts'* time to first
piece, seeded with the inner tier's ``latency_prior``. The gate's model of this tier
cannot serve: it measures whole calls (retries included) and learns from cut-offs. A
``predict`` callable (ms) may replace it. A cold tier (no prior, nothing measured)
predicts +inf and is never retried. The gate's own cut-off still bounds every retry, so a
wrong prediction wastes work but never breaks a budget.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

from rtgate.core.budget import Budget
from rtgate.core.errors import BackendProtocolError, BackendUnavailable
from rtgate.core.latency import LatencyModel
from rtgate.core.request import Piece, Request
from rtgate.resilience.wrap import TierWrapper, aclose_quietly
from rtgate.tiers.base import Tier

__all__ = ["RetryTier"]

DEFAULT_RETRY_ON: tuple[type[BaseException], ...] = (BackendUnavailable, BackendProtocolError)


class RetryTier(TierWrapper):
    """``inner`` with up to ``attempts`` tries per call, when the budget allows.

    Args:
        attempts: tries in all (2: one retry).
        backoff_ms: wait before retry k (k = 1, 2, ...) is ``backoff_ms * 2**(k-1)``,
            with full jitter (a uniform draw in [0, that]) from a seeded generator.
        retry_on: exception types that may be retried.
        predict: the inner tier's predicted p99 time to first piece in ms (default: learned).
    """

    def __init__(
        self,
        inner: Tier,
        *,
        attempts: int = 2,
        backoff_ms: float = 0.0,
        retry_on: tuple[type[BaseException], ...] = DEFAULT_RETRY_ON,
        predict: Callable[[], float] | None = None,
        window: int = 256,
        seed: int | None = 0,
    ) -> None:
        super().__init__(inner)
        if attempts < 1:
            raise ValueError("attempts must be >= 1")
        if backoff_ms < 0:
            raise ValueError("backoff_ms must be >= 0")
        self.attempts = attempts
        self.backoff_ms = backoff_ms
        self.retry_on = retry_on
        self._predict = predict
        self.model = LatencyModel(self.latency_prior, window=window)
        self.rng = random.Random(seed)
        self.retried = 0
        self.gave_up = 0
        self.recovered = 0

    def predicted_ms(self) -> float:
        """The p99 time to first piece of one attempt."""
        return self._predict() if self._predict is not None else self.model.predict_ttft("p99")

    def can_retry(self, budget: Budget, wait_ms: float) -> bool:
        return budget.left_ms() >= wait_ms + self.predicted_ms()

    async def stream(self, request: Request, budget: Budget) -> AsyncIterator[str | Piece]:
        clock = budget.clock
        for attempt in range(1, self.attempts + 1):
            started = clock()
            agen = self.inner.stream(request, budget)
            try:
                first = await anext(agen)
            except StopAsyncIteration:
                return
            except self.retry_on:
                await aclose_quietly(agen)
                wait_ms = self._backoff(attempt)
                if attempt >= self.attempts or not self.can_retry(budget, wait_ms):
                    self.gave_up += 1
                    raise
                self.retried += 1
                if wait_ms > 0:
                    await asyncio.sleep(wait_ms / 1000.0)
                continue
            except BaseException:
                await aclose_quietly(agen)
                raise
            self.model.observe((clock() - started) * 1000.0)
            if attempt > 1:
                self.recovered += 1
            try:
                yield first
                async for piece in agen:
                    yield piece
            finally:
                await aclose_quietly(agen)
            return

    def _backoff(self, attempt: int) -> float:
        if not self.backoff_ms:
            return 0.0
        return self.rng.uniform(0.0, self.backoff_ms * 2 ** (attempt - 1))

    def snapshot(self) -> dict[str, Any]:
        return {
            "retried": self.retried,
            "recovered": self.recovered,
            "gave_up": self.gave_up,
            "predicted_ttft_p99_ms": self.predicted_ms(),
        }
