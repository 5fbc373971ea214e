"""Resilience as tier middleware: circuit breaker, admission control, budget-aware retry.

Each wrapper is a :class:`~rtgate.tiers.base.Tier` around a tier, so the gate is unchanged.
:func:`resilient` stacks them in the order that makes sense::

    AdmissionTier(            # outermost: a shed call costs nothing
        RetryTier(            # retries one attempt at a time, while the budget allows
            BreakerTier(      # records every attempt; open -> Declined, which stops retries
                tier)))
"""

from __future__ import annotations

from rtgate.resilience.admission import AdmissionTier, ConcurrencyLimiter
from rtgate.resilience.breaker import (
    BreakerConfig,
    BreakerTier,
    CircuitBreaker,
    Probe,
    tier_probe,
)
from rtgate.resilience.retry import RetryTier
from rtgate.resilience.wrap import TierWrapper
from rtgate.tiers.base import Tier

__all__ = [
    "AdmissionTier",
    "BreakerConfig",
    "BreakerTier",
    "CircuitBreaker",
    "ConcurrencyLimiter",
    "RetryTier",
    "TierWrapper",
    "resilient",
    "tier_probe",
]


def resilient(
    tier: Tier,
    *,
    capacity: int | ConcurrencyLimiter | None = None,
    breaker: BreakerConfig | None = None,
    probe: Probe | bool = False,
    retry_attempts: int = 1,
    retry_backoff_ms: float = 0.0,
) -> Tier:
    """``tier`` wrapped in the requested layers (none requested: ``tier`` itself).

    Args:
        capacity: concurrency cap (or a limiter shared with other tiers on one backend).
        breaker: a circuit breaker with this configuration.
        probe: with a breaker, health-check it in the background while open: ``True`` for
            :func:`tier_probe` on ``tier``, or your own probe.
        retry_attempts: tries per call (1: no retry).
    """
    out = tier
    if breaker is not None:
        chosen: Probe | None
        if probe is True:
            chosen = tier_probe(tier)
        elif probe is False:
            chosen = None
        else:
            chosen = probe
        out = BreakerTier(out, breaker, probe=chosen)
    if retry_attempts > 1:
        out = RetryTier(out, attempts=retry_attempts, backoff_ms=retry_backoff_ms)
    if capacity is not None:
        out = AdmissionTier(out, capacity)
    return out
