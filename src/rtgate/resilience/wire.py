"""Put resilience wrappers around the tiers of a built gate, by tier name.

For code that assembles a gate from a configuration::

    gate = build_gate(config)
    apply_policies(gate, {
        "local": TierPolicy(capacity=1, group="llama"),
        "cloud": TierPolicy(capacity=32, breaker=BreakerConfig(), probe=True, retries=2),
    })

Call it before the gate starts. Tiers in one ``group`` share one concurrency limiter (tiers
on one backend: one model, one inference queue). The gate keeps its learned latencies:
a wrapper has its tier's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rtgate.core.errors import ConfigError
from rtgate.gate import Gate
from rtgate.resilience import resilient
from rtgate.resilience.admission import ConcurrencyLimiter
from rtgate.resilience.breaker import BreakerConfig
from rtgate.resilience.wrap import TierWrapper
from rtgate.tiers.base import Tier

__all__ = ["TierPolicy", "apply_policies", "resilience_snapshot"]


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """What to wrap one tier in (all off by default)."""

    capacity: int | None = None
    group: str | None = None
    breaker: BreakerConfig | None = None
    probe: bool = False
    retries: int = 1
    retry_backoff_ms: float = 0.0


def apply_policies(gate: Gate, policies: Mapping[str, TierPolicy]) -> dict[str, Tier]:
    """Wrap the named tiers of ``gate`` in place; returns the new tiers by name."""
    unknown = sorted(set(policies) - set(gate.by_name))
    if unknown:
        raise ConfigError(
            f"resilience policy for unknown tier(s) {unknown}; tiers: {sorted(gate.by_name)}"
        )
    limiters: dict[str, ConcurrencyLimiter] = {}
    out: dict[str, Tier] = {}
    for name, p in policies.items():
        capacity: int | ConcurrencyLimiter | None = p.capacity
        if p.capacity is not None and p.group is not None:
            capacity = limiters.setdefault(p.group, ConcurrencyLimiter(p.capacity, p.group))
        tier = resilient(
            gate.by_name[name],
            capacity=capacity,
            breaker=p.breaker,
            probe=p.probe,
            retry_attempts=p.retries,
            retry_backoff_ms=p.retry_backoff_ms,
        )
        out[name] = tier
    gate.tiers = [out.get(t.name, t) for t in gate.tiers]
    gate.by_name = {t.name: t for t in gate.tiers}
    return out


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
