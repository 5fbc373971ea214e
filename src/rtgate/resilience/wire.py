"""Put a tier in its resilience wrappers before the gate is built: a function from a tier
to the wrapped tier.

For code that assembles a gate::

    limiters: dict[str, ConcurrencyLimiter] = {}
    local = with_policy(local, TierPolicy(capacity=1, group="llama"), limiters)
    cloud = with_policy(cloud, TierPolicy(capacity=32, breaker=BreakerConfig(), probe=True,
                                          retries=2), limiters)
    gate = Gate([cloud, local, templates])

Tiers whose policies name one ``group`` share one concurrency limiter, kept in
``limiters`` (tiers on one backend: one model, one inference queue). A wrapper has its
tier's name, rank and latency prior, so the gate sees one tier.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtgate.gate import Gate
from rtgate.resilience import resilient
from rtgate.resilience.admission import ConcurrencyLimiter
from rtgate.resilience.breaker import BreakerConfig
from rtgate.resilience.wrap import TierWrapper
from rtgate.tiers.base import Tier

__all__ = ["TierPolicy", "resilience_snapshot", "with_policy"]


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """What to wrap one tier in (all off by default)."""

    capacity: int | None = None
    group: str | None = None
    breaker: BreakerConfig | None = None
    probe: bool = False
    retries: int = 1
    retry_backoff_ms: float = 0.0


def with_policy(
    tier: Tier, policy: TierPolicy, limiters: dict[str, ConcurrencyLimiter] | None = None
) -> Tier:
    """``tier`` in the wrappers ``policy`` asks for (none: ``tier`` itself).

    ``limiters`` holds the limiter of each ``group``; the first policy of a group sets its
    capacity, and every later tier of the group shares it.
    """
    capacity: int | ConcurrencyLimiter | None = policy.capacity
    if policy.capacity is not None and policy.group is not None and limiters is not None:
        capacity = limiters.setdefault(
            policy.group, ConcurrencyLimiter(policy.capacity, policy.group)
        )
    return resilient(
        tier,
        capacity=capacity,
        breaker=policy.breaker,
        probe=policy.probe,
        retry_attempts=policy.retries,
        retry_backoff_ms=policy.retry_backoff_ms,
    )


def resilience_snapshot(gate: Gate) -> dict[str, Any]:
    """Breaker, admission and retry counters of every wrapped tier (for /healthz)."""
    snap: dict[str, Any] = {}
    for tier in gate.tiers:
        layers: dict[str, Any] = {}
        t: Tier = tier
        while isinstance(t, TierWrapper):
            fn = getattr(t, "snapshot", None)
            if fn is not None:
                layers[type(t).__name__] = fn()
            t = t.inner
        if layers:
            snap[tier.name] = layers
    return snap
